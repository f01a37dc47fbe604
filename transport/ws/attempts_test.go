package ws_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/transport/ws"
)

// TestUnwrittenDeliveriesKeepTheirAttempt: a work-queue consumer that
// stops reading has most of its deliveries waiting in its connection's
// write queue when the connection is lost. Those the server never wrote go
// back to the group without spending an attempt: the next consumer gets
// them as attempt 1. Those written (the client may have seen them, and
// here it reads them from its socket after the loss) come back as attempt
// 2. Every message comes back once, none as attempt 3. Before, every
// delivery pending when the connection ended was a spent attempt, the
// never-written ones included.
func TestUnwrittenDeliveriesKeepTheirAttempt(t *testing.T) {
	for _, tc := range []struct {
		name, opts string
	}{
		{"deliver frames", `,"window":1000`},
		{"deliver_batch frames", `,"window":1000,"batch":true`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newEnv(t, &ws.Options{WriteQueue: 4096, WriteQueueBytes: 512 << 20, ServerQueueBytes: 1 << 30, PublishRate: -1},
				func(o *pigeon.Options) {
					for i := range o.Catalog.Subjects {
						if p := &o.Catalog.Subjects[i]; p.Name == "jobs.run" {
							p.Delivery.AckWaitMs = time.Hour.Milliseconds() // no ack wait passes in the test
							p.Delivery.Retry.MaxAttempts = 5
						}
					}
				})
			ctx := context.Background()
			crew := v.raw(t, "crew-token")
			crew.negotiate("jobs.run")
			crew.ok(ws.OpSubscribe, `,"subject":"jobs.run","group":"g"`+tc.opts, ws.OpSubscribed)
			boss, err := v.e.Connect(ctx, "boss-token", []string{"jobs.run"})
			require.NoError(t, err)
			defer boss.Close(ctx)

			// The consumer reads nothing while 300 jobs of 64 KiB (19 MiB)
			// are published: far more than the network holds, so most
			// wait in the write queue.
			const n = 300
			pad := strings.Repeat("x", 64<<10)
			ids := map[string]bool{}
			for i := range n {
				res, err := boss.Publish(ctx, &pigeon.Message{Type: "job", Subject: "jobs.run", Intent: "run",
					Data: json.RawMessage(`{"n":` + strconv.Itoa(i) + `,"pad":"` + pad + `"}`)})
				require.NoError(t, err)
				ids[res.Message.ID] = true
			}
			eventually(t, func() bool { return v.srv.PendingDeliveries() == n }, "every job handed to the consumer: %d", v.srv.PendingDeliveries())
			eventually(t, func() bool { return v.srv.Stats().QueuedBytes > 4<<20 }, "deliveries wait in the write queue")

			// The connection is lost. What the server wrote is still in
			// the consumer's socket: it reads it now.
			v.kl.kill()
			seen := map[string]bool{}
			for {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, b, err := crew.c.Read(rctx)
				timedOut := rctx.Err() != nil
				cancel()
				if err != nil {
					require.False(t, timedOut, "the connection did not end")
					break
				}
				f, err := ws.DecodeFrame(b)
				require.NoError(t, err)
				switch f.Op {
				case ws.OpDeliver:
					seen[f.Message.ID] = true
				case ws.OpDeliverBatch:
					for _, d := range f.Deliveries {
						seen[d.Message.ID] = true
					}
				}
			}

			// A second consumer of the group takes every job.
			var (
				mu  sync.Mutex
				got = map[string][]int{} // attempts by message id
			)
			crew2, err := v.e.Connect(ctx, "crew-token", []string{"jobs.run"})
			require.NoError(t, err)
			defer crew2.Close(ctx)
			_, err = crew2.Subscribe(ctx, "jobs.run", func(_ context.Context, d *pigeon.Delivery) error {
				mu.Lock()
				got[d.Message.ID] = append(got[d.Message.ID], d.Attempt)
				mu.Unlock()
				return nil
			}, pigeon.WithGroup("g"), pigeon.WithMaxInFlight(16))
			require.NoError(t, err)
			eventually(t, func() bool {
				st, err := v.st.LoadGroup(ctx, store.GroupKey{Subject: "jobs.run", Group: "g"})
				require.NoError(t, err)
				return st.Floor == n
			}, "every job acked: %s", groupStateOf(t, v, "jobs.run", "g"))

			mu.Lock()
			defer mu.Unlock()
			require.Len(t, got, n, "every job came back")
			fresh := 0
			for id, attempts := range got {
				require.True(t, ids[id], "a job of the test: %s", id)
				require.Len(t, attempts, 1, "job %s delivered once", id)
				switch a := attempts[0]; {
				case seen[id]:
					require.Equal(t, 2, a, "job %s, written before the loss: a spent attempt", id)
				case a == 1:
					fresh++
				default:
					// Written in part, or lost in the network with the
					// connection: the client may have seen it.
					require.Equal(t, 2, a, "job %s, not read by the consumer", id)
				}
			}
			require.Positive(t, fresh, "the jobs never written keep their attempt (%d read by the consumer of %d)", len(seen), n)
			// Spent but not read: the frame being written when the
			// connection was lost, and what the writer had corked
			// (256 KiB), a few jobs at most.
			require.LessOrEqual(t, n-len(seen)-fresh, 16, "jobs spent that the consumer never read (%d read, %d fresh, of %d)", len(seen), fresh, n)
		})
	}
}
