package pigeon_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
)

// slowLowering is a node's view of the shared store whose first lowering
// of a recorded attempt (a delivery given back uncounted) is held
// (heldOnce). A plain MarkAttempt that lowers the count is held as
// LowerAttempt is.
type slowLowering struct {
	nodeStore
	*heldOnce
}

func newSlowLowering(shared *memory.Store) *slowLowering {
	return &slowLowering{nodeStore: viewOf(shared), heldOnce: newHeldOnce()}
}

func (s *slowLowering) MarkAttempt(ctx context.Context, key store.GroupKey, seq uint64, n int) error {
	g, err := s.nodeStore.LoadGroup(ctx, key)
	if err != nil {
		return err
	}
	if n >= g.Attempts[seq] {
		return s.nodeStore.MarkAttempt(ctx, key, seq, n)
	}
	return s.hold(func() error { return s.nodeStore.MarkAttempt(ctx, key, seq, n) })
}

func (s *slowLowering) LowerAttempt(ctx context.Context, key store.GroupKey, seq uint64, from, to int) error {
	return s.hold(func() error { return s.nodeStore.LowerAttempt(ctx, key, seq, from, to) })
}

var _ store.AttemptLowerer = (*slowLowering)(nil)

// TestALateGiveBackLeavesAnotherNodesAttemptCounted: node A's push
// handler cannot take a delivery (ErrUndelivered), and A gives its
// attempt back: it lowers the group's stored attempt, then returns the
// cluster lease. A's store write is slow, and lands after A's lease ran
// out in the cluster and node B leased the message as attempt 2 and
// recorded it. The write overwrote (MarkAttempt): the store then held
// attempt 0 while B ran attempt 2. Once the cluster's lease record of the
// message is gone (store/jetstream keeps one for a day after its last
// write), the next lease counted from that: a message allowed two
// attempts was delivered a third time, as attempt 1. The engine now
// lowers by compare-and-set (store.AttemptLowerer): the store refuses,
// since it no longer holds A's attempt, A's attempt stays spent, B's
// count stands, and the next lease exhausts the message.
func TestALateGiveBackLeavesAnotherNodesAttemptCounted(t *testing.T) {
	clk := newClock()
	shared := memory.New(nil)
	h := &hub{leases: map[string]*hubLease{}, now: clk.Now, progress: shared}
	slow := newSlowLowering(shared)
	oa, ob := returnOptions(clk.Now, 2), returnOptions(clk.Now, 2)
	oa.Store, oa.Cluster = slow, h.node()
	ob.Store, ob.Cluster = viewOf(shared), h.node()
	a, b := startEngine(t, oa), startEngine(t, ob)

	handed := make(chan int, 4)
	sub, err := dupConnect(t, a, "crew-token", "jobs.run").Subscribe(context.Background(), "jobs.run", func(_ context.Context, d *pigeon.Delivery) error {
		handed <- d.Attempt
		return pigeon.ErrUndelivered
	})
	require.NoError(t, err)
	id := publishN(t, dupConnect(t, a, "boss-token", "jobs.run"), dupCases[0], 0, 1)[0]
	require.Equal(t, 1, awaitOn(t, handed, "node A never had the message"))
	awaitOn(t, slow.entered, "node A never gave the attempt back")

	// A's write waits: its lease runs out in the cluster, and B takes
	// the message over as its second attempt, recorded in the store.
	clk.Advance(2 * dupAckWait)
	rb := dupConnect(t, b, "crew-token", "jobs.run").(pigeon.AttemptSettler)
	msgs, attempts, err := rb.ReceiveAttempts(context.Background(), "jobs.run", 10)
	require.NoError(t, err)
	require.Len(t, msgs, 1, "node B did not take the message over")
	require.Equal(t, []int{2}, attempts)
	seq := msgs[0].Sequence
	key := store.GroupKey{Subject: "jobs.run", Group: pigeon.DefaultGroup}

	close(slow.proceed)
	awaitOn(t, slow.written, "node A's give-back never reached the store")
	require.NoError(t, sub.Unsubscribe(context.Background()))
	g, err := shared.LoadGroup(context.Background(), key)
	require.NoError(t, err)
	require.Equal(t, 2, g.Attempts[seq], "node A's late give-back lowered the attempt node B recorded")

	requireExhaustedFromTheStore(t, h, b, rb, key, id, seq)
}
