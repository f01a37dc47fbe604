package ws_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/internal/testclock"
	"pigeon/transport/transporttest"
	"pigeon/transport/ws"
)

// rateLimitedRecords closes the coalescing window of v's engine, whose
// clock is clk, and returns its RATE_LIMITED records of ev, each an
// outcome deny judged by no gate of the engine.
func rateLimitedRecords(t *testing.T, v *env, clk *testclock.Clock, ev pigeon.Event) []pigeon.AuditRecord {
	t.Helper()
	clk.Advance(2 * time.Second) // the runs' windows close: their counts are written
	recs, err := v.e.Audit(context.Background(), 0, 100000)
	require.NoError(t, err)
	var out []pigeon.AuditRecord
	for _, r := range recs {
		if r.Type != string(ev) || r.Code != string(pigeon.CodeRateLimited) {
			continue
		}
		require.Equal(t, string(pigeon.OutcomeDeny), r.Outcome)
		require.Empty(t, r.Gate, "no gate of the engine judged it")
		out = append(out, r)
	}
	return out
}

// refs returns the Refs of recs, in order.
func refs(recs []pigeon.AuditRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Ref
	}
	return out
}

// TestRequestBoundRefusalsAudited: a request frame refused RATE_LIMITED
// before it is published, beyond the connection's MaxInFlight requests
// waiting for replies or beyond its principal's
// MaxRequestBytesPerPrincipal, is audited as a request the engine refuses
// is: publish.denied, RATE_LIMITED, naming the principal, its contract,
// the subject, the message and where it was refused ("ws request in
// flight", "ws request bytes"), coalesced per principal, subject and code,
// so a flood of them writes one record and one count. Before, these
// refusals left no record.
func TestRequestBoundRefusalsAudited(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    ws.Options
		ref     string
		message string // in the refusal's text
	}{
		{"in flight", ws.Options{MaxInFlight: 1}, "ws request in flight", "too many requests waiting"},
		{"bytes", ws.Options{MaxRequestBytesPerPrincipal: 1}, "ws request bytes", "MaxRequestBytesPerPrincipal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := testclock.New(time.Now()) // one coalescing window until advanced
			v := newEnv(t, &tc.opts, func(o *pigeon.Options) { o.Now = clk.Now })
			p, err := v.e.Authenticate(context.Background(), "checkout-token")
			require.NoError(t, err)
			c := v.raw(t, "checkout-token")
			contract := c.negotiate("payments.authorize")
			// r1 waits for a reply nobody sends, holding the bound.
			c.write(`{"op":"request","id":"r1","timeoutMs":60000,"message":` + msgJSON(t, demo.Payment("o-0")) + `}`)
			c.ok(ws.OpPing, "", ws.OpPong) // the server read r1 before the ping

			const flood = 30
			for i := range flood {
				m := demo.Payment("o-" + strconv.Itoa(i+1))
				m.ID = "req-" + strconv.Itoa(i+1)
				f := c.fail(ws.OpRequest, `,"timeoutMs":50,"message":`+msgJSON(t, m), pigeon.CodeRateLimited)
				require.Contains(t, f.Error.Message, tc.message)
			}

			recs := rateLimitedRecords(t, v, clk, pigeon.EventPublishDenied)
			require.Less(t, len(recs), flood, "coalesced")
			require.Equal(t, []string{tc.ref, "coalesced:" + strconv.Itoa(flood-1) + " last:" + tc.ref}, refs(recs))
			for _, r := range recs {
				require.Equal(t, p.ID, r.Principal)
				require.Equal(t, contract.ID, r.ContractID)
				require.Equal(t, "payments.authorize", r.Subject)
			}
			require.Equal(t, "req-1", recs[0].MessageID, "the run's first names its message")
			require.NoError(t, c.c.CloseNow()) // r1 ends with its connection
		})
	}
}

// TestReadBudgetRefusalsAudited: a replay or receive frame refused
// RATE_LIMITED before anything is read, because the server's read pool
// has no room for it (MaxReadBytesInFlight, after waiting) or its
// principal's reads hold their share (MaxReadBytesPerPrincipal), is
// audited as a replay or receive the engine refuses is: replay.denied or
// receive.denied, RATE_LIMITED, naming the principal, its contract, the
// subject and where it was refused ("ws replay read budget", "ws receive
// read budget"), coalesced per principal, subject and code, so a flood of
// them writes one record and one count for each event. Before, these
// refusals left no record.
func TestReadBudgetRefusalsAudited(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    ws.Options
		message string // in the refusal's text: the bound that refused it
	}{
		// One answer of 8 MiB and one reservation of 17 MiB do not both
		// fit; alice may take the whole pool.
		{"pool", ws.Options{MaxReadBytesInFlight: 20 << 20, MaxReadBytesPerPrincipal: -1, StallTimeout: time.Hour}, "MaxReadBytesInFlight"},
		// Alice's share is one reservation of 17 MiB.
		{"share", ws.Options{MaxReadBytesInFlight: 48 << 20, StallTimeout: time.Hour}, "MaxReadBytesPerPrincipal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			defer ws.SetReadWait(50 * time.Millisecond)()
			clk := testclock.New(time.Now()) // one coalescing window until advanced
			v := newEnv(t, &tc.opts, bulkEvents, func(o *pigeon.Options) { o.Now = clk.Now })
			p, err := v.e.Authenticate(ctx, "alice-token")
			require.NoError(t, err)
			k, err := v.e.Negotiate(ctx, p, "uk", []string{"bulk.events"}, 0)
			require.NoError(t, err)
			blob := strings.Repeat("x", 512<<10)
			for i := range 20 {
				_, err := v.e.Publish(ctx, pigeon.Caller{Principal: p, Region: "uk", ContractID: k.ID()}, &pigeon.Message{
					Type: "bulk", Subject: "bulk.events", Intent: "record", Data: json.RawMessage(fmt.Sprintf(`{"n":%d,"blob":%q}`, i, blob))})
				require.NoError(t, err)
			}

			// A connection that sends replay after replay and never reads
			// the answers holds the bound.
			stuck := v.rawWith(t, &websocket.DialOptions{HTTPClient: smallReceiveBuffer(), HTTPHeader: http.Header{"Authorization": {"Bearer alice-token"}}})
			stuckContract := stuck.negotiate("bulk.events")
			for i := range 40 {
				stuck.write(fmt.Sprintf(`{"op":"replay","id":"r%d","subject":"bulk.events","reason":"audit"}`, i))
			}
			eventually(t, func() bool { return v.srv.Stats().ReadsRefused > 0 }, "the stuck connection's replays reach the bound: %+v", v.srv.Stats())

			other := v.raw(t, "alice-token")
			otherContract := other.negotiate("bulk.events")
			const flood = 20 // half replays, half receives
			for i := range flood {
				op, body := ws.OpReplay, `,"subject":"bulk.events","reason":"audit","max":1`
				if i%2 == 1 {
					op, body = ws.OpReceive, `,"subject":"bulk.events","max":1`
				}
				f := other.fail(op, body, pigeon.CodeRateLimited)
				require.Contains(t, f.Error.Message, tc.message)
			}
			// The stuck connection's replays end with it, refused or not,
			// before the windows close: none starts a run of its own.
			require.NoError(t, stuck.c.CloseNow())
			eventually(t, func() bool { return v.srv.Stats().Open == 1 }, "the stuck connection is torn down: %+v", v.srv.Stats())

			contracts := []string{stuckContract.ID, otherContract.ID}
			replays := rateLimitedRecords(t, v, clk, pigeon.EventReplayDenied)
			require.Len(t, replays, 2, "the first of the run and its count: %v", refs(replays))
			require.Equal(t, "ws replay read budget", replays[0].Ref)
			require.True(t, strings.HasPrefix(replays[1].Ref, "coalesced:"), replays[1].Ref)
			require.True(t, strings.HasSuffix(replays[1].Ref, " last:ws replay read budget"), replays[1].Ref)
			receives := rateLimitedRecords(t, v, clk, pigeon.EventReceiveDenied)
			require.Equal(t, []string{"ws receive read budget", "coalesced:" + strconv.Itoa(flood/2-1) + " last:ws receive read budget"}, refs(receives))
			require.Equal(t, otherContract.ID, receives[0].ContractID)
			for _, r := range append(replays, receives...) {
				require.Equal(t, transporttest.Alice, r.Principal)
				require.Contains(t, contracts, r.ContractID)
				require.Equal(t, "bulk.events", r.Subject)
			}
		})
	}
}

// TestUpgradeBoundRefusalsAudited: an upgrade, its credential accepted,
// refused 429 RATE_LIMITED beyond MaxConnections or its principal's
// MaxConnectionsPerPrincipal is audited as an operation refused to a
// principal is: access.denied, RATE_LIMITED, naming the principal and the
// bound ("ws upgrade connection limit", "ws upgrade connections per
// principal"), coalesced per principal and code, so a client that
// reconnects in a loop writes one record and one count naming the latest.
// Before, these refusals left no record.
func TestUpgradeBoundRefusalsAudited(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts ws.Options
		ref  string
	}{
		{"connection limit", ws.Options{MaxConnections: 1}, "ws upgrade connection limit"},
		{"connections per principal", ws.Options{MaxConnectionsPerPrincipal: 1}, "ws upgrade connections per principal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := testclock.New(time.Now()) // one coalescing window until advanced
			v := newEnv(t, &tc.opts, func(o *pigeon.Options) { o.Now = clk.Now })
			held := v.raw(t, "alice-token")
			held.ok(ws.OpPing, "", ws.OpPong)

			const flood = 10
			for range flood {
				c, resp, err := websocket.Dial(context.Background(), v.url, &websocket.DialOptions{
					HTTPHeader: http.Header{"Authorization": {"Bearer alice-token"}}})
				if err == nil {
					_ = c.CloseNow()
				}
				require.Error(t, err)
				require.NotNil(t, resp, "%v", err)
				require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
			}

			recs := rateLimitedRecords(t, v, clk, pigeon.EventAccessDenied)
			require.Less(t, len(recs), flood, "coalesced")
			require.Equal(t, []string{tc.ref, "coalesced:" + strconv.Itoa(flood-1) + " last:" + tc.ref}, refs(recs))
			for _, r := range recs {
				require.Equal(t, transporttest.Alice, r.Principal)
				require.Empty(t, r.Subject)
			}
		})
	}
}
