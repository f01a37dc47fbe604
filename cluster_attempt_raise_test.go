package pigeon_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
)

// slowAttempt is a node's view of the shared store whose first write of a
// delivery attempt (MarkAttempt, as a lease begins) waits: entered is
// closed as it begins, it goes on once proceed is closed, and written is
// closed once the store answered it.
type slowAttempt struct {
	nodeStore
	once                      sync.Once
	entered, proceed, written chan struct{}
}

func newSlowAttempt(shared *memory.Store) *slowAttempt {
	return &slowAttempt{nodeStore: viewOf(shared), entered: make(chan struct{}), proceed: make(chan struct{}), written: make(chan struct{})}
}

func (s *slowAttempt) MarkAttempt(ctx context.Context, key store.GroupKey, seq uint64, n int) error {
	first := false
	s.once.Do(func() { first = true })
	if !first {
		return s.nodeStore.MarkAttempt(ctx, key, seq, n)
	}
	close(s.entered)
	<-s.proceed
	defer close(s.written)
	return s.nodeStore.MarkAttempt(ctx, key, seq, n)
}

var _ store.AttemptLowerer = (*slowAttempt)(nil)

// TestALateAttemptWriteLeavesAnotherNodesLaterAttempt: node A leases a
// message (the cluster counts attempt 1) and records the attempt in the
// group's stored progress, but its write is slow, and lands after A's
// lease ran out in the cluster and node B leased the message as attempt
// 2 and recorded that. The write overwrote (MarkAttempt): the store then
// held attempt 1 while B ran attempt 2. Once the cluster's lease record
// of the message is gone (store/jetstream keeps one for a day after its
// last write), the next lease counted from that: a message allowed two
// attempts was delivered a third time, as attempt 2 again. MarkAttempt
// now only raises a count: A's late write leaves B's attempt 2, and the
// next lease exhausts the message.
func TestALateAttemptWriteLeavesAnotherNodesLaterAttempt(t *testing.T) {
	clk := newClock()
	shared := memory.New(nil)
	h := &hub{leases: map[string]*hubLease{}, now: clk.Now, progress: shared}
	slow := newSlowAttempt(shared)
	oa, ob := returnOptions(clk.Now, 2), returnOptions(clk.Now, 2)
	oa.Store, oa.Cluster = slow, h.node()
	ob.Store, ob.Cluster = viewOf(shared), h.node()
	a, b := startEngine(t, oa), startEngine(t, ob)
	id := publishN(t, dupConnect(t, b, "boss-token", "jobs.run"), dupCases[0], 0, 1)[0]
	key := store.GroupKey{Subject: "jobs.run", Group: pigeon.DefaultGroup}
	stored := func() int {
		t.Helper()
		g, err := shared.LoadGroup(context.Background(), key)
		require.NoError(t, err)
		require.Len(t, g.Attempts, 1, "one message, one attempt count")
		for _, n := range g.Attempts {
			return n
		}
		return 0
	}

	type received struct {
		msgs     []*pigeon.Message
		attempts []int
		err      error
	}
	onA := make(chan received, 1)
	ra := dupConnect(t, a, "crew-token", "jobs.run").(pigeon.AttemptSettler)
	go func() {
		msgs, attempts, err := ra.ReceiveAttempts(context.Background(), "jobs.run", 10)
		onA <- received{msgs, attempts, err}
	}()
	awaitOn(t, slow.entered, "node A never recorded its attempt")

	// A's write waits: its lease runs out in the cluster, and B takes
	// the message over as its second attempt, recorded in the store.
	clk.Advance(2 * dupAckWait)
	rb := dupConnect(t, b, "crew-token", "jobs.run").(pigeon.AttemptSettler)
	msgs, attempts, err := rb.ReceiveAttempts(context.Background(), "jobs.run", 10)
	require.NoError(t, err)
	require.Len(t, msgs, 1, "node B did not take the message over")
	require.Equal(t, []int{2}, attempts)
	seq := msgs[0].Sequence
	require.Equal(t, 2, stored())

	close(slow.proceed)
	awaitOn(t, slow.written, "node A's attempt never reached the store")
	got := awaitOn(t, onA, "node A's receive never returned")
	require.NoError(t, got.err)
	require.Empty(t, got.attempts, "node A's lease ran out meanwhile: not handed over")
	require.Equal(t, 2, stored(), "node A's late write of attempt 1 lowered the attempt node B recorded")

	// B gives its attempt up (its consumer nacks), and the cluster's
	// lease record of the message is gone, as store/jetstream's is a day
	// after its last write: the next lease counts from the store.
	require.NoError(t, rb.NackAttempt(context.Background(), "jobs.run", id, seq, 2, 0))
	h.mu.Lock()
	delete(h.leases, leaseKey(key, seq))
	h.mu.Unlock()
	msgs, attempts, err = rb.ReceiveAttempts(context.Background(), "jobs.run", 10)
	require.NoError(t, err)
	require.Empty(t, msgs, "a message allowed two attempts was delivered again, as attempt %v", attempts)
	rec := auditedOf(t, b, pigeon.EventDeliveryExhausted, id) // waits for it
	require.Equal(t, string(pigeon.CodeDeliveryExhausted), rec.Code)
}
