package pigeon_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
)

// stallingNode is a hub node whose first done release (an answer
// settling its cluster lease) runs stall first: the node's lease runs out
// meanwhile and another node takes the message over, as when a settled
// receive takes longer than its ack wait between its lease and its
// settle (a large batch on a slow store, a stalled process).
type stallingNode struct {
	*hubNode
	once  sync.Once
	stall func()
}

func (n *stallingNode) Release(ctx context.Context, key store.GroupKey, seq uint64, attempt int, done bool, retryAt time.Time) error {
	if done {
		n.once.Do(n.stall)
	}
	return n.hubNode.Release(ctx, key, seq, attempt, done, retryAt)
}

// A settled receive (ReceiveSettled, the HTTP pull) whose cluster lease
// ran out, and was taken over by another node, before it settled it
// hands nothing out: the cluster refuses its settle (ACK_NOT_ALLOWED),
// the refusal is audited ack.denied as a late answer's is, the group's
// progress does not record the message done, and the message stays the
// other node's, settled by its consumer's ack. Before, the refused
// message was handed out all the same: two nodes delivered it, and the
// settled receive's caller ran it while the other node's consumer did.
func TestASettledReceiveHandsOutNothingTheClusterRefused(t *testing.T) {
	clk := newClock()
	v := &lateNodes{h: &hub{leases: map[string]*hubLease{}, now: clk.Now}, shared: memory.New(nil), clk: clk}
	var (
		crewB pigeon.AttemptSettler
		seq   uint64
	)
	a := &stallingNode{hubNode: v.h.node(), stall: func() {
		v.clk.Advance(2 * extendAck) // node A's lease runs out in the cluster
		msgs, attempts, err := crewB.ReceiveAttempts(context.Background(), "jobs.run", 10)
		require.NoError(t, err)
		require.Len(t, msgs, 1, "node B took the message over")
		require.Equal(t, 2, attempts[0], "node B's lease is the message's second attempt")
		seq = msgs[0].Sequence
	}}
	v.ns = [2]*hubNode{a.hubNode, v.h.node()}
	for i, n := range []pigeon.Cluster{a, v.ns[1]} {
		o := extendOptions()
		o.Store, o.Cluster, o.Now = viewOf(v.shared), n, clk.Now
		v.es[i] = startEngine(t, o)
	}
	crewA := dupConnect(t, v.es[0], "crew-token", "jobs.run")
	crewB = dupConnect(t, v.es[1], "crew-token", "jobs.run").(pigeon.AttemptSettler)
	id := publishN(t, dupConnect(t, v.es[0], "boss-token", "jobs.run"), dupCases[0], 0, 1)[0]

	got, err := v.es[0].ReceiveSettled(context.Background(), callerOf(crewA), "jobs.run", 10)
	require.NoError(t, err)
	require.NotZero(t, seq, "node A's settle never reached the cluster")
	require.Empty(t, got, "a message the cluster refused to settle was handed out while node B runs it")

	rec := auditedOf(t, v.es[0], pigeon.EventAckDenied, id)
	require.Equal(t, string(pigeon.CodeAckNotAllowed), rec.Code)
	require.Equal(t, strconv.FormatUint(seq, 10), rec.Seqs)
	require.False(t, v.doneInProgress(t, "jobs.run", seq), "node A's refused settle marked the message done while node B runs it")
	holder, done := v.leaseOf("jobs.run", seq)
	require.Equal(t, v.ns[1], holder, "node A's refused settle took node B's lease")
	require.False(t, done)

	// Node B's consumer settles the message.
	require.NoError(t, crewB.AckAttempt(context.Background(), "jobs.run", id, seq, 2))
	require.True(t, v.doneInProgress(t, "jobs.run", seq))
}
