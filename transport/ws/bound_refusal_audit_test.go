package ws_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/internal/audittest"
	"pigeon/internal/testclock"
	"pigeon/transport/transporttest"
	"pigeon/transport/ws"
)

// rateLimitedRecords closes the coalescing windows of v's engine (clk)
// and returns its RATE_LIMITED records of ev (audittest.BoundRefusals).
func rateLimitedRecords(t *testing.T, v *env, clk *testclock.Clock, ev pigeon.Event) []pigeon.AuditRecord {
	t.Helper()
	clk.Advance(2 * time.Second) // the runs' windows close: their counts are written
	return audittest.BoundRefusals(t, v.e, ev, pigeon.CodeRateLimited)
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
			require.Equal(t, []string{tc.ref, "coalesced:" + strconv.Itoa(flood-1) + " last:" + tc.ref}, audittest.Refs(recs))
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
			defer ws.SetReadWait(50 * time.Millisecond)()
			clk := testclock.New(time.Now()) // one coalescing window until advanced
			v := newEnv(t, &tc.opts, bulkEvents, func(o *pigeon.Options) { o.Now = clk.Now })
			stuck, stuckContract := holdReadPool(t, v)

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
			require.Len(t, replays, 2, "the first of the run and its count: %v", audittest.Refs(replays))
			require.Equal(t, "ws replay read budget", replays[0].Ref)
			require.True(t, strings.HasPrefix(replays[1].Ref, "coalesced:"), replays[1].Ref)
			require.True(t, strings.HasSuffix(replays[1].Ref, " last:ws replay read budget"), replays[1].Ref)
			receives := rateLimitedRecords(t, v, clk, pigeon.EventReceiveDenied)
			require.Equal(t, []string{"ws receive read budget", "coalesced:" + strconv.Itoa(flood/2-1) + " last:ws receive read budget"}, audittest.Refs(receives))
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
			require.Equal(t, []string{tc.ref, "coalesced:" + strconv.Itoa(flood-1) + " last:" + tc.ref}, audittest.Refs(recs))
			for _, r := range recs {
				require.Equal(t, transporttest.Alice, r.Principal)
				require.Empty(t, r.Subject)
			}
		})
	}
}
