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
//
// The same holds when the engine ends the subscription (its contract is
// revoked) with the connection open: the writer drops the frames it had
// not begun, and their deliveries go back uncounted.
func TestUnwrittenDeliveriesKeepTheirAttempt(t *testing.T) {
	for _, tc := range []struct {
		name, opts string
		revoke     bool
	}{
		{"deliver frames", `,"window":1000`, false},
		{"deliver_batch frames", `,"window":1000,"batch":true`, false},
		{"revoked, deliver frames", `,"window":1000`, true},
		{"revoked, deliver_batch frames", `,"window":1000,"batch":true`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, crew, info, ids := congestedConsumer(t, tc.opts, func(p *pigeon.SubjectPolicy) {
				p.Delivery.AckWaitMs = time.Hour.Milliseconds() // no ack wait passes in the test
				p.Delivery.Retry.MaxAttempts = 5
			})
			ctx := context.Background()
			const n = congestedJobs
			eventually(t, func() bool { return v.srv.PendingDeliveries() == n }, "every job handed to the consumer: %d", v.srv.PendingDeliveries())
			eventually(t, func() bool { return v.srv.Stats().QueuedBytes > 4<<20 }, "deliveries wait in the write queue")

			// The connection is lost, or the contract revoked. What the
			// server wrote is still in the consumer's socket: it reads it
			// now, up to the end of the connection or of the
			// subscription.
			if tc.revoke {
				p, err := v.e.Authenticate(ctx, "crew-token")
				require.NoError(t, err)
				require.NoError(t, v.e.RevokeContract(ctx, p, info.ID))
			} else {
				v.kl.kill()
			}
			seen := map[string]bool{}
			for ended := false; !ended; {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, b, err := crew.c.Read(rctx)
				timedOut := rctx.Err() != nil
				cancel()
				if err != nil {
					require.False(t, timedOut, "the connection did not end")
					require.False(t, tc.revoke, "the connection ended: %v", err)
					break
				}
				f, err := ws.DecodeFrame(b)
				require.NoError(t, err)
				switch f.Op {
				case ws.OpUnsubscribed:
					ended = true
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

// TestAckWaitWithholdsQueuedFrames: a work-queue consumer that stops
// reading has most of its deliveries waiting in the write queue when
// their ack wait passes. The attempt is spent, and the frames the writer
// had not begun are never written: when the consumer reads again it gets
// the redeliveries, not the first attempts it could no longer answer.
// Before, every queued first attempt was written late, after its
// redelivery had been decided.
func TestAckWaitWithholdsQueuedFrames(t *testing.T) {
	for _, tc := range []struct {
		name, opts string
	}{
		{"deliver frames", `,"window":1000`},
		{"deliver_batch frames", `,"window":1000,"batch":true`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, crew, _, ids := congestedConsumer(t, tc.opts, func(p *pigeon.SubjectPolicy) {
				p.Delivery.AckWaitMs = 1500
				p.Delivery.Retry.MaxAttempts = 1000
				p.Delivery.Retry.MaxDelayMs = 10
			})
			ctx := context.Background()
			const n = congestedJobs
			// Every job's ack wait passes while the consumer reads
			// nothing: each is offered again (attempt 2 or later).
			eventually(t, func() bool {
				st, err := v.st.LoadGroup(ctx, store.GroupKey{Subject: "jobs.run", Group: "g"})
				require.NoError(t, err)
				for _, a := range st.Attempts {
					if a < 2 {
						return false
					}
				}
				return len(st.Attempts) == n
			}, "every job's first ack wait passed: %s", groupStateOf(t, v, "jobs.run", "g"))

			// The consumer reads again, answering nothing, until it has
			// seen every job offered again.
			first, again := map[string]bool{}, map[string]bool{}
			for len(again) < n {
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, b, err := crew.c.Read(rctx)
				cancel()
				require.NoError(t, err, "%d jobs seen again of %d", len(again), n)
				f, err := ws.DecodeFrame(b)
				require.NoError(t, err)
				var ds []ws.DeliveryEntry
				switch f.Op {
				case ws.OpDeliver:
					ds = append(ds, ws.DeliveryEntry{Attempt: f.Attempt, Message: f.Message})
				case ws.OpDeliverBatch:
					ds = f.Deliveries
				}
				for _, d := range ds {
					require.True(t, ids[d.Message.ID])
					if d.Attempt == 1 {
						first[d.Message.ID] = true
					} else {
						again[d.Message.ID] = true
					}
				}
			}
			// First attempts read: what was written before the ack wait
			// passed (the network's buffers and the frame in progress,
			// a few MiB), not the 19 MiB that waited in the queue, and
			// were not offered again meanwhile.
			require.Less(t, len(first), n/2, "first attempts written after their ack wait passed")
		})
	}
}

// congestedJobs is how many jobs congestedConsumer publishes.
const congestedJobs = 300

// congestedConsumer starts a server whose write queue holds far more than
// the network does, with jobs.run's delivery policy set by policy (and a
// 1 ms first redelivery backoff), and a raw consumer of group "g" that
// subscribes with opts and reads nothing while congestedJobs jobs of
// 64 KiB (19 MiB) are published: most of their deliveries wait in its
// write queue. It returns the consumer's contract and the jobs' ids.
func congestedConsumer(t *testing.T, opts string, policy func(*pigeon.SubjectPolicy)) (*env, *rawClient, pigeon.ContractInfo, map[string]bool) {
	t.Helper()
	v := newEnv(t, &ws.Options{WriteQueue: 4096, WriteQueueBytes: 512 << 20, ServerQueueBytes: 1 << 30, PublishRate: -1},
		func(o *pigeon.Options) {
			for i := range o.Catalog.Subjects {
				if p := &o.Catalog.Subjects[i]; p.Name == "jobs.run" {
					policy(p)
				}
			}
			o.RetryBase = time.Millisecond
		})
	ctx := context.Background()
	crew := v.raw(t, "crew-token")
	info := crew.negotiate("jobs.run")
	crew.ok(ws.OpSubscribe, `,"subject":"jobs.run","group":"g"`+opts, ws.OpSubscribed)
	boss, err := v.e.Connect(ctx, "boss-token", []string{"jobs.run"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = boss.Close(context.Background()) })
	pad := strings.Repeat("x", 64<<10)
	ids := map[string]bool{}
	for i := range congestedJobs {
		res, err := boss.Publish(ctx, &pigeon.Message{Type: "job", Subject: "jobs.run", Intent: "run",
			Data: json.RawMessage(`{"n":` + strconv.Itoa(i) + `,"pad":"` + pad + `"}`)})
		require.NoError(t, err)
		ids[res.Message.ID] = true
	}
	return v, crew, info, ids
}
