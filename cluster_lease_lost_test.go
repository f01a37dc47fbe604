package pigeon_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testlog"
	"pigeon/store"
)

// takeOver gives node n every lease of the hub not done, held for an
// hour by the hub's clock, as a node does that took them after they ran
// out while their holder was cut off or stalled.
func (h *hub) takeOver(n *hubNode) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.leases {
		if !l.done {
			l.node, l.until = n, h.clock().Add(time.Hour)
		}
	}
}

// heldBy reports whether every lease of the hub is held by n, none done.
func (h *hub) heldBy(n *hubNode) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.leases {
		if l.done || l.node != n {
			return false
		}
	}
	return len(h.leases) > 0
}

// auditedOf waits until e's audit log holds a record of ev for message id
// and returns it.
func auditedOf(t *testing.T, e *pigeon.Engine, ev pigeon.Event, id string) store.AuditRecord {
	t.Helper()
	var rec store.AuditRecord
	require.Eventually(t, func() bool {
		recs, err := e.Audit(context.Background(), 0, 0)
		require.NoError(t, err)
		for _, r := range recs {
			if r.Type == string(ev) && r.MessageID == id {
				rec = r
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "no %s record of %s", ev, id)
	return rec
}

// awaitOn waits for a value on ch.
func awaitOn[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: timed out", what)
		panic("unreachable")
	}
}

// When the cluster reports the lease of a message whose handler runs on
// node A lost (it ran out while node A was cut off or stalled, and node B
// took it), the handler's context is cancelled, its cause a *pigeon.Error
// ACK_NOT_ALLOWED: the delivery is no longer its own. Its answer settles
// nothing, an ack as a nack, audited ack.denied or nack.denied: node B
// holds the message's lease, and an ack on node A would have marked it
// done under node B's run. The loss is logged, the lease is extended no
// more, and node A asks the cluster again. Before, the handler ran on with
// a live context, and its ack marked the message done in the cluster.
func TestALostClusterLeaseCancelsItsHandler(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answer  func(cause error) error
		refused pigeon.Event
	}{
		{"Ack", func(error) error { return nil }, pigeon.EventAckDenied},
		{"Nack", func(cause error) error { return cause }, pigeon.EventNackDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs testlog.Buffer
			clk := newClock()
			h, es, ns := extendingNodes(t, &logs, clk)
			c := dupCases[0]
			pub := dupConnect(t, es[1], c.pub, c.subject)
			started, causes := make(chan string, 8), make(chan error, 8)
			sub, err := dupConnect(t, es[0], c.sub, c.subject).Subscribe(context.Background(), c.subject, func(ctx context.Context, d *pigeon.Delivery) error {
				started <- d.Message.ID
				<-ctx.Done()
				cause := context.Cause(ctx)
				causes <- cause
				return tc.answer(cause)
			})
			require.NoError(t, err)
			t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
			id := publishN(t, pub, c, 0, 1)[0]
			require.Equal(t, id, awaitOn(t, started, "the handler never started"))

			h.takeOver(ns[1].hubNode)
			clk.Advance(extendAck) // the lease's extension is due
			cause := awaitOn(t, causes, "the handler's context was not cancelled when its cluster lease was lost")
			var pe *pigeon.Error
			require.ErrorAs(t, cause, &pe)
			require.Equal(t, pigeon.CodeAckNotAllowed, pe.Code)
			calls := ns[0].calls.Load()

			rec := auditedOf(t, es[0], tc.refused, id)
			require.Equal(t, string(pigeon.CodeAckNotAllowed), rec.Code)
			require.Equal(t, string(pigeon.OutcomeDeny), rec.Outcome)
			clk.Advance(3 * extendAck)
			// Node A asks the cluster again, which has the message
			// leased to node B: nothing of node A's settled it.
			require.Eventually(t, func() bool { return ns[0].acquires.Load() >= 2 }, 10*time.Second, time.Millisecond)
			require.True(t, h.heldBy(ns[1].hubNode), "node A's answer settled or released node B's lease")
			require.Equal(t, calls, ns[0].calls.Load(), "a lost lease was extended again")
			require.Contains(t, logs.String(), "cluster leases were lost")
			select {
			case again := <-started:
				t.Fatalf("node A ran %s again while node B holds it", again)
			default:
			}
		})
	}
}

// An AsyncHandler (a transport's) is told of a lost lease through
// WithLeaseLost, with the message's id and sequence, while its delivery
// is unanswered; its later done settles nothing (ack.denied).
func TestALostClusterLeaseIsToldToAnAsyncHandler(t *testing.T) {
	clk := newClock()
	h, es, ns := extendingNodes(t, nil, clk)
	c := dupCases[0]
	pub := dupConnect(t, es[1], c.pub, c.subject)
	type handed struct {
		d    *pigeon.Delivery
		done func(error)
	}
	type lostOne struct {
		id  string
		seq uint64
	}
	deliveries, lost := make(chan handed, 8), make(chan lostOne, 8)
	caller := dupConnect(t, es[0], c.sub, c.subject).(interface{ Caller() pigeon.Caller }).Caller()
	sub, err := es[0].SubscribeAsync(context.Background(), caller, c.subject, func(_ context.Context, d *pigeon.Delivery, done func(error)) {
		deliveries <- handed{d, done}
	}, pigeon.WithLeaseLost(func(id string, seq uint64) { lost <- lostOne{id, seq} }))
	require.NoError(t, err)
	var once sync.Once
	var pending handed
	t.Cleanup(func() {
		if pending.done != nil {
			once.Do(func() { pending.done(pigeon.ErrUndelivered) })
		}
		_ = sub.Unsubscribe(context.Background())
	})
	id := publishN(t, pub, c, 0, 1)[0]
	pending = awaitOn(t, deliveries, "nothing was handed over")
	require.Equal(t, id, pending.d.Message.ID)

	h.takeOver(ns[1].hubNode)
	clk.Advance(extendAck)
	got := awaitOn(t, lost, "the lease's loss was not told")
	require.Equal(t, lostOne{id, pending.d.Message.Sequence}, got)
	once.Do(func() { pending.done(nil) })
	rec := auditedOf(t, es[0], pigeon.EventAckDenied, id)
	require.Equal(t, string(pigeon.CodeAckNotAllowed), rec.Code)
	require.True(t, h.heldBy(ns[1].hubNode), "the acknowledgement settled node B's lease")
}

// A batch slower than a whole ack wait (its store calls took long; its
// leases all date from its start) has run out its leases before they are
// handed over. They are extended first: a lease still this node's is
// handed over with an ack wait ahead of it, not already run out for the
// other nodes; one another node took meanwhile is not handed over at all
// (node A asks the cluster again). Before, the handover came first, and
// the handler ran a message another node held, or whose lease had run
// out.
func TestABatchSlowerThanItsAckWaitIsExtendedBeforeItIsHandedOver(t *testing.T) {
	for _, tc := range []struct {
		name  string
		taken bool // node B takes the lease while the batch is slow
	}{
		{"StillHeld", false},
		{"TakenMeanwhile", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			h, es, ns := extendingNodes(t, nil, clk)
			var slowOnce sync.Once
			ns[0].slow = func() {
				slowOnce.Do(func() {
					clk.Advance(2 * extendAck)
					if tc.taken {
						h.takeOver(ns[1].hubNode)
					}
				})
			}
			c := dupCases[0]
			pub := dupConnect(t, es[1], c.pub, c.subject)
			left := make(chan time.Duration, 8)
			sub, err := dupConnect(t, es[0], c.sub, c.subject).Subscribe(context.Background(), c.subject, func(context.Context, *pigeon.Delivery) error {
				left <- h.leftOf(ns[0].hubNode)
				return nil
			})
			require.NoError(t, err)
			t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
			publishN(t, pub, c, 0, 1)
			if !tc.taken {
				got := awaitOn(t, left, "the message was not handed over")
				require.Greater(t, got, 2*extendAck/3, "handed over with its cluster lease run out or nearly")
				return
			}
			require.Eventually(t, func() bool { return ns[0].acquires.Load() >= 2 || len(left) > 0 }, 10*time.Second, time.Millisecond)
			require.Empty(t, left, "node A handed over a message node B holds")
			require.True(t, h.heldBy(ns[1].hubNode))
		})
	}
}
