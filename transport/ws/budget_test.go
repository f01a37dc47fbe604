package ws_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// Subscribers that stop reading, with a large maxInFlight, on a backlog
// far larger than the write budgets: what the server holds for them stays
// within the budgets, and once they read again every message arrives.
func TestSlowSubscribersStayWithinTheWriteBudgets(t *testing.T) {
	const size = 64 << 10
	for _, tc := range []struct {
		name              string
		msgs, subscribers int
		opts              ws.Options
		bound             int64
	}{
		{"per connection", 320, 1, ws.Options{WriteQueueBytes: 1 << 20}, 1 << 20}, // 20 MiB
		// A connection with nothing queued may always queue one frame.
		{"per server", 160, 2, ws.Options{WriteQueueBytes: 1 << 20, ServerQueueBytes: 1 << 20}, 1<<20 + 2*(size+2048)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.PublishRate = -1
			opts.StallTimeout = 5 * 60e9 // a reader that pauses is not stalled here
			v := newEnv(t, &opts)
			ctx := context.Background()
			readers := make([]*rawClient, tc.subscribers)
			subs := make([]string, tc.subscribers)
			for i := range readers {
				r := v.raw(t, "bob-token")
				r.negotiate("chat.messages")
				subs[i] = r.ok(ws.OpSubscribe, `,"subject":"chat.messages","maxInFlight":1000`, ws.OpSubscribed).Sub
				readers[i] = r
			}
			alice, err := v.e.Connect(ctx, "alice-token", []string{"chat.messages"})
			require.NoError(t, err)
			defer alice.Close(ctx)
			pad := strings.Repeat("x", size)
			for i := range tc.msgs {
				_, err := alice.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat",
					Data: []byte(`{"n":` + strconv.Itoa(i) + `,"pad":"` + pad + `"}`)})
				require.NoError(t, err)
				require.LessOrEqual(t, v.srv.Stats().QueuedBytes, tc.bound, "after message %d", i)
			}
			require.LessOrEqual(t, v.srv.Stats().QueuedBytesPeak, tc.bound)
			require.Positive(t, v.srv.Stats().QueuedBytesPeak, "the subscribers' frames did wait")

			// They read again: every message arrives, once.
			for i, r := range readers {
				seen := map[uint64]bool{}
				for len(seen) < tc.msgs {
					f := r.next()
					if f.Op != ws.OpDeliver {
						require.Equal(t, ws.OpOK, f.Op, "%+v", f.Error)
						continue
					}
					m := decodeMsg(t, f.Message)
					require.False(t, seen[m.Sequence], "sequence %d delivered twice", m.Sequence)
					require.Equal(t, 1, f.Attempt)
					require.Len(t, m.Data, size+len(`{"n":,"pad":""}`)+len(strconv.Itoa(int(m.Sequence-1))))
					seen[m.Sequence] = true
					r.n++
					r.write(`{"op":"ack","id":"a` + strconv.Itoa(r.n) + `","sub":"` + subs[i] + `","messageId":"` + m.ID + `"}`)
				}
				for seq := uint64(1); seq <= uint64(tc.msgs); seq++ {
					require.True(t, seen[seq], "subscriber %d got sequence %d", i, seq)
				}
			}
			require.LessOrEqual(t, v.srv.Stats().QueuedBytesPeak, tc.bound)
			eventually(t, func() bool { return v.srv.Stats().QueuedBytes == 0 }, "every queued byte is given back: %+v", v.srv.Stats())
		})
	}
}
