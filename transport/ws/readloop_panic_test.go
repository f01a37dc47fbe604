package ws_test

import (
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testlog"
	"pigeon/transport/ws"
)

// TestReadLoopPanicClosesOnlyItsConnection: a panic of the work a
// connection's read loop does inline, on its own goroutine rather than an
// op worker's (settling a push delivery with an ack frame; what it does
// for an op it has counted before a worker takes it), ends that
// connection alone, as an op's panic does: the frame is answered
// INTERNAL, the connection closed with 1011, the panic logged with its
// stack, a card number in it redacted. Everything the connection held is
// released: its subscription ends and gives its two deliveries back, so
// another consumer of the group gets them; its slot is freed; the server
// goes on. Before, net/http recovered the panic, logging the card number
// whole, and left the hijacked connection open and unanswered, never torn
// down: the client waited for its deadline, the deliveries stayed leased
// to the dead subscription, the connection's goroutines and its slot of
// the principal's connections stayed held. The second case, once the loop
// recovered, still hung in teardown, waiting for the op it had counted.
func TestReadLoopPanicClosesOnlyItsConnection(t *testing.T) {
	for _, c := range []struct {
		name  string
		frame func(sub string) string // the frame, id "boom", the hook panics on
	}{
		{"SettlingADelivery", func(sub string) string {
			return `{"op":"ack","id":"boom","sub":"` + sub + `","messageId":"job-1"}`
		}},
		{"AnOpCountedForAWorker", func(sub string) string {
			return `{"op":"unsubscribe","id":"boom","sub":"` + sub + `"}`
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			logs := &testlog.Buffer{}
			v := newEnv(t, ws.WithReadHook(&ws.Options{Logger: logs.Logger()}, func(f *ws.Frame) {
				if f.ID == "boom" {
					panic("settling for card 4111111111111111")
				}
			}), longAckWait)
			boss := v.raw(t, "boss-token")
			boss.negotiate("jobs.run")
			crew := v.raw(t, "crew-token")
			crew.negotiate("jobs.run")
			sub := crew.ok(ws.OpSubscribe, `,"subject":"jobs.run","group":"g","maxInFlight":2`, ws.OpSubscribed).Sub
			for n, id := range []string{"job-1", "job-2"} {
				boss.ok(ws.OpPublish, `,"message":`+jobJSON(id, n), ws.OpDecision)
				d := crew.push()
				require.Equal(t, ws.OpDeliver, d.Op)
				require.Equal(t, id, decodeMsg(t, d.Message).ID)
			}

			crew.write(c.frame(sub))
			a := crew.answer("boom")
			require.Equal(t, ws.OpError, a.Op, "answer %+v", a)
			require.Equal(t, pigeon.CodeInternal, a.Error.Code)
			require.Equal(t, websocket.StatusInternalError, crew.closeStatus())
			out := logs.String()
			require.Contains(t, out, "the websocket read loop panicked")
			require.Contains(t, out, "surviveRead", "the stack is logged")
			require.Contains(t, out, pigeon.Redacted)
			require.NotContains(t, out, "4111111111111111")

			// The deliveries the connection held go to the group's next
			// consumer; the server serves it.
			other := v.raw(t, "crew-token")
			other.negotiate("jobs.run")
			other.ok(ws.OpSubscribe, `,"subject":"jobs.run","group":"g","maxInFlight":2`, ws.OpSubscribed)
			var got []string
			for range 2 {
				d := other.push()
				require.Equal(t, ws.OpDeliver, d.Op)
				got = append(got, decodeMsg(t, d.Message).ID)
			}
			require.ElementsMatch(t, []string{"job-1", "job-2"}, got)
			eventually(t, func() bool { return v.srv.Stats().Open == 2 }, "the connection's slot is freed: %d open", v.srv.Stats().Open)
		})
	}
}
