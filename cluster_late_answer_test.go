package pigeon_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testclock"
	"pigeon/store"
	"pigeon/store/memory"
)

// lateNodes are two engines on one memory store, joined by a hub whose
// nodes do not extend leases, jobs.run's ack wait extendAck; the engines
// and the hub's leases run on clk.
type lateNodes struct {
	h      *hub
	shared *memory.Store
	es     [2]*pigeon.Engine
	ns     [2]*hubNode
	clk    *testclock.Clock
}

func newLateNodes(t *testing.T) *lateNodes {
	v := &lateNodes{h: &hub{leases: map[string]*hubLease{}}, shared: memory.New(nil), clk: newClock()}
	v.h.now = v.clk.Now
	for i := range v.es {
		o := extendOptions()
		v.ns[i] = v.h.node()
		o.Store, o.Cluster, o.Now = viewOf(v.shared), v.ns[i], v.clk.Now
		v.es[i] = startEngine(t, o)
	}
	return v
}

// doneInProgress reports whether some group of subject records seq done
// in the shared store: the progress every node loads.
func (v *lateNodes) doneInProgress(t *testing.T, subject string, seq uint64) bool {
	t.Helper()
	gs, err := v.shared.ListGroups(context.Background(), subject, 100)
	require.NoError(t, err)
	for _, g := range gs {
		if g.IsDone(seq) {
			return true
		}
	}
	return false
}

// leaseOf reports which node holds the hub's lease of seq on subject,
// and whether it is done.
func (v *lateNodes) leaseOf(subject string, seq uint64) (holder *hubNode, done bool) {
	v.h.mu.Lock()
	defer v.h.mu.Unlock()
	for k, l := range v.h.leases {
		if k == leaseKey(store.GroupKey{Subject: subject, Group: pigeon.DefaultGroup}, seq) {
			return l.node, l.done
		}
	}
	return nil, false
}

// takeOverByReceive has node B's pull consumer receive the message whose
// lease node A let run out: its lease is node B's, attempt 2.
func (v *lateNodes) takeOverByReceive(t *testing.T, b pigeon.AttemptSettler, id string) (seq uint64) {
	t.Helper()
	v.clk.Advance(2 * extendAck) // node A's lease runs out in the cluster
	var msgs []*pigeon.Message
	var attempts []int
	require.Eventually(t, func() bool {
		var err error
		msgs, attempts, err = b.ReceiveAttempts(context.Background(), "jobs.run", 10)
		require.NoError(t, err)
		return len(msgs) > 0
	}, 10*time.Second, time.Millisecond, "node B never took the message over")
	require.Len(t, msgs, 1)
	require.Equal(t, id, msgs[0].ID)
	require.Equal(t, 2, attempts[0], "node B's lease is the message's second attempt")
	holder, done := v.leaseOf("jobs.run", msgs[0].Sequence)
	require.Equal(t, v.ns[1], holder)
	require.False(t, done)
	return msgs[0].Sequence
}

// A node answers late: its lease of a work-queue message ran out in the
// cluster (its consumer acked after the ack wait, before the node took
// its own lease back; or its handler ran past the ack wait on a Cluster
// that does not extend leases), and node B took the message over and runs
// it. Node A's answer is refused ACK_NOT_ALLOWED (a pull ack) or settles
// nothing (a handler's), audited ack.denied: the group's progress, which
// every node shares, does not mark the message done, and node B's lease
// stays as it is. Node B's answer settles the message. Before, node A
// marked the message done in the group's progress first and released the
// lease after, logging the cluster's refusal: the message was done for
// every node while node B still ran it, and node A's consumer was told
// its ack was taken.
func TestALateAnswerOnAnotherNodesLeaseSettlesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		// lateAck delivers the message on node A and has it acked there
		// after node B took it over (takeOver); it returns the message's
		// id.
		lateAck func(t *testing.T, v *lateNodes, takeOver func(id string) uint64) string
	}{
		{"PullAck", func(t *testing.T, v *lateNodes, takeOver func(string) uint64) string {
			a := dupConnect(t, v.es[0], "crew-token", "jobs.run").(pigeon.AttemptSettler)
			id := publishN(t, dupConnect(t, v.es[0], "boss-token", "jobs.run"), dupCases[0], 0, 1)[0]
			msgs, attempts, err := a.ReceiveAttempts(context.Background(), "jobs.run", 10)
			require.NoError(t, err)
			require.Len(t, msgs, 1)
			require.Equal(t, 1, attempts[0])
			seq := takeOver(id)
			err = a.AckAttempt(context.Background(), "jobs.run", id, seq, attempts[0])
			requireCode(t, err, pigeon.CodeAckNotAllowed)
			return id
		}},
		{"HandlerAnswer", func(t *testing.T, v *lateNodes, takeOver func(string) uint64) string {
			started, answer := make(chan string, 8), make(chan struct{})
			sub, err := dupConnect(t, v.es[0], "crew-token", "jobs.run").Subscribe(context.Background(), "jobs.run", func(_ context.Context, d *pigeon.Delivery) error {
				started <- d.Message.ID
				<-answer
				return nil
			})
			require.NoError(t, err)
			t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
			id := publishN(t, dupConnect(t, v.es[0], "boss-token", "jobs.run"), dupCases[0], 0, 1)[0]
			require.Equal(t, id, awaitOn(t, started, "the handler never started"))
			takeOver(id)
			close(answer)
			return id
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newLateNodes(t)
			b := dupConnect(t, v.es[1], "crew-token", "jobs.run").(pigeon.AttemptSettler)
			var seq uint64
			id := tc.lateAck(t, v, func(id string) uint64 {
				seq = v.takeOverByReceive(t, b, id)
				return seq
			})

			rec := auditedOf(t, v.es[0], pigeon.EventAckDenied, id)
			require.Equal(t, string(pigeon.CodeAckNotAllowed), rec.Code)
			require.Equal(t, string(pigeon.OutcomeDeny), rec.Outcome)
			require.False(t, v.doneInProgress(t, "jobs.run", seq), "node A's late answer marked the message done in the group's progress while node B runs it")
			holder, done := v.leaseOf("jobs.run", seq)
			require.Equal(t, v.ns[1], holder, "node A's late answer took node B's lease")
			require.False(t, done, "node A's late answer settled node B's lease")

			// Node B's answer settles the message.
			require.NoError(t, b.AckAttempt(context.Background(), "jobs.run", id, seq, 2))
			require.True(t, v.doneInProgress(t, "jobs.run", seq))
			_, done = v.leaseOf("jobs.run", seq)
			require.True(t, done)
			auditedOf(t, v.es[1], pigeon.EventDeliveryAcked, id)
		})
	}
}

// A node settled a message's cluster lease and stopped (or its store
// write failed) before it recorded the message done in the group's
// progress: the next node that finds the lease settled writes the
// progress, so that it catches up. Before, that node took the message as
// done in its own memory only, and the group's progress never recorded
// it: every node that loaded the group asked the cluster for it again,
// and its floor stayed below it.
func TestAClusterSettledLeaseCatchesTheProgressUp(t *testing.T) {
	v := newLateNodes(t)
	r, err := dupConnect(t, v.es[0], "boss-token", "jobs.run").Publish(context.Background(), dupCases[0].msg(0))
	require.NoError(t, err)
	seq := r.Message.Sequence
	v.h.mu.Lock()
	v.h.leases[leaseKey(store.GroupKey{Subject: "jobs.run", Group: pigeon.DefaultGroup}, seq)] = &hubLease{node: v.ns[1], attempt: 1, done: true}
	v.h.mu.Unlock()
	require.False(t, v.doneInProgress(t, "jobs.run", seq))

	a := dupConnect(t, v.es[0], "crew-token", "jobs.run").(pigeon.AttemptSettler)
	msgs, _, err := a.ReceiveAttempts(context.Background(), "jobs.run", 10)
	require.NoError(t, err)
	require.Empty(t, msgs, "a message the cluster has settled was handed out")
	require.True(t, v.doneInProgress(t, "jobs.run", seq), "the group's progress did not catch up with the settled lease")
}
