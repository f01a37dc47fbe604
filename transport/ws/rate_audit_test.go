package ws_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testclock"
	"pigeon/transport/transporttest"
	"pigeon/transport/ws"
)

// TestConnectionRateRefusalsAudited: a frame refused RATE_LIMITED by the
// connection's own publish rate (Options.PublishRate), before the engine
// sees its message, is audited as the engine audits its rate gate's
// refusals: publish.denied, outcome deny, RATE_LIMITED, naming the
// principal and its contract, the subject only when the catalog has it,
// and coalesced per principal, subject and code, so that a flood of
// refused frames writes one record and one count per run, not one each.
// A batch refused wholly or in part is one refusal; a request is refused
// as a publish. Before, these refusals left no record at all.
func TestConnectionRateRefusalsAudited(t *testing.T) {
	clk := testclock.New(time.Now()) // one coalescing window until advanced
	v := newEnv(t, &ws.Options{PublishRate: 0.001, PublishBurst: 2}, func(o *pigeon.Options) { o.Now = clk.Now })
	ctx := t.Context()
	alice := v.raw(t, "alice-token")
	contract := alice.negotiate("chat.messages")
	const unknown = `{"type":"chat","subject":"made.up","intent":"chat","data":{"text":"hi"}}`
	// The first refused publish, whose record starts its run, is named by
	// a card number, which no gate judged here: its record names it
	// [REDACTED], as every record does.
	const card = `{"id":"4111111111111111","type":"chat","subject":"chat.messages","intent":"chat","data":{"text":"hi"}}`

	alice.ok(ws.OpPublish, `,"message":`+chatJSON, ws.OpDecision)
	f := alice.ok(ws.OpPublishBatch, `,"messages":[`+chatJSON+`,`+chatJSON+`]`, ws.OpDecisions) // one admitted, one refused in its slot
	require.Nil(t, f.Results[0].Error)
	require.Equal(t, pigeon.CodeRateLimited, f.Results[1].Error.Code)
	const flood = 60
	for i := range flood {
		switch i % 3 {
		case 0:
			alice.fail(ws.OpPublish, `,"message":`+card, pigeon.CodeRateLimited)
		case 1:
			alice.fail(ws.OpRequest, `,"timeoutMs":50,"message":`+chatJSON, pigeon.CodeRateLimited)
		default:
			alice.fail(ws.OpPublish, `,"message":`+unknown, pigeon.CodeRateLimited) // not a new run per made-up subject
		}
	}
	alice.fail(ws.OpPublishBatch, `,"messages":[`+chatJSON+`]`, pigeon.CodeRateLimited)
	require.Equal(t, int64(flood+2), v.srv.Stats().RateLimited)

	clk.Advance(2 * time.Second) // the runs' windows close: their counts are written
	recs, err := v.e.Audit(ctx, 0, 100000)
	require.NoError(t, err)
	runs := map[string][]string{} // subject: the refs of its records
	total := 0
	for _, r := range recs {
		if r.Type != string(pigeon.EventPublishDenied) || r.Code != string(pigeon.CodeRateLimited) {
			continue
		}
		require.Equal(t, string(pigeon.OutcomeDeny), r.Outcome)
		require.Equal(t, transporttest.Alice, r.Principal)
		require.Equal(t, contract.ID, r.ContractID)
		require.Empty(t, r.Gate, "not the engine's rate gate")
		require.NotContains(t, r.MessageID, "4111111111111111", "a card number is named [REDACTED] in every record")
		runs[r.Subject] = append(runs[r.Subject], r.Ref)
		total++
	}
	require.LessOrEqual(t, total, 4, "coalesced: %v", runs)
	require.Equal(t, map[string][]string{
		"chat.messages": {"ws publish connection rate", "coalesced:39 (refs differ) last:ws request connection rate"},
		"":              {"ws publish_batch connection rate: 1 of 2 messages", "coalesced:21 (refs differ) last:ws publish_batch connection rate: 1 of 1 messages"},
	}, runs)
}
