package ws_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/transport/transporttest"
	"pigeon/transport/ws"
)

// A publish, publish_batch or request frame carrying a depth ("hops") from a
// principal without the role bridge is refused FORBIDDEN before the engine
// sees it; the refusal is audited all the same, as the HTTP server audits
// a refusal for want of a role: access.denied, outcome deny, FORBIDDEN,
// naming the principal, its contract and the operation, and the subject
// when the catalog has it (one the sender made up is left out, so naming a
// new one each time starts no new run of coalesced refusals).
func TestRefusedDepthIsAudited(t *testing.T) {
	v := newEnv(t, nil)
	ctx := t.Context()
	const (
		known   = `{"id":"4111111111111111","type":"chat","subject":"chat.messages","intent":"chat","data":{"text":"hi"}}`
		unknown = `{"id":"msg_deep_2","type":"chat","subject":"made.up","intent":"chat","data":{"text":"hi"}}`
	)
	bob := v.raw(t, "bob-token")
	bobContract := bob.negotiate("chat.messages")
	alice := v.raw(t, "alice-token")
	aliceContract := alice.negotiate("chat.messages")
	checkout := v.raw(t, "checkout-token")
	checkoutContract := checkout.negotiate("payments.authorize")
	request := demo.Payment("o-deep")
	request.ID = "4242424242424242"
	for _, tc := range []struct {
		name                string
		c                   *rawClient
		op, body            string
		principal, contract string
		subject, messageID  string
	}{
		{"publish", bob, ws.OpPublish, `,"hops":3,"message":` + known, transporttest.Bob, bobContract.ID, "chat.messages", "[REDACTED]"},
		{"publish_batch", bob, ws.OpPublishBatch, `,"hops":3,"messages":[` + known + `]`, transporttest.Bob, bobContract.ID, "", ""},
		{"publish of a subject not in the catalog", alice, ws.OpPublish, `,"hops":1,"message":` + unknown, transporttest.Alice, aliceContract.ID, "", "msg_deep_2"},
		{"request", checkout, ws.OpRequest, `,"hops":2,"timeoutMs":50,"message":` + msgJSON(t, request), demo.Checkout, checkoutContract.ID, "payments.authorize", "[REDACTED]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.fail(tc.op, tc.body, pigeon.CodeForbidden)
			recs, err := v.e.Audit(ctx, 0, 100000)
			require.NoError(t, err)
			var got []pigeon.AuditRecord
			for _, r := range recs {
				if r.Type == string(pigeon.EventAccessDenied) && r.Principal == tc.principal && r.Ref == "ws "+tc.op+" hops" {
					got = append(got, r)
				}
			}
			require.Len(t, got, 1, "the refusal's record")
			r := got[0]
			require.Equal(t, string(pigeon.OutcomeDeny), r.Outcome)
			require.Equal(t, string(pigeon.CodeForbidden), r.Code)
			require.Equal(t, tc.contract, r.ContractID)
			require.Equal(t, tc.subject, r.Subject)
			require.Equal(t, tc.messageID, r.MessageID, "the id, a card number named [REDACTED] as in every record")
		})
	}
	// Two ids were card numbers, which no gate judged here: as in every
	// record (Event.record), no record of the refusals holds one.
	recs, err := v.e.Audit(ctx, 0, 100000)
	require.NoError(t, err)
	for _, r := range recs {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		require.NotContains(t, string(b), "4111111111111111")
		require.NotContains(t, string(b), "4242424242424242")
	}
}
