package pigeon_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testclock"
	"pigeon/store"
	"pigeon/store/memory"
)

// heldOnce holds the first write made through it: entered is closed as
// it begins, it goes on once proceed is closed, and written is closed once
// the store answered it. Every other write goes on at once.
type heldOnce struct {
	once                      sync.Once
	entered, proceed, written chan struct{}
}

func newHeldOnce() *heldOnce {
	return &heldOnce{entered: make(chan struct{}), proceed: make(chan struct{}), written: make(chan struct{})}
}

func (h *heldOnce) hold(write func() error) error {
	first := false
	h.once.Do(func() { first = true })
	if !first {
		return write()
	}
	close(h.entered)
	<-h.proceed
	defer close(h.written)
	return write()
}

// slowAttempt is a node's view of the shared store whose first write of a
// delivery attempt (MarkAttempt, as a lease begins) is held (heldOnce).
type slowAttempt struct {
	nodeStore
	*heldOnce
}

func newSlowAttempt(shared *memory.Store) *slowAttempt {
	return &slowAttempt{nodeStore: viewOf(shared), heldOnce: newHeldOnce()}
}

func (s *slowAttempt) MarkAttempt(ctx context.Context, key store.GroupKey, seq uint64, n int) error {
	return s.hold(func() error { return s.nodeStore.MarkAttempt(ctx, key, seq, n) })
}

var _ store.AttemptLowerer = (*slowAttempt)(nil)

// lateAttemptNodes are nodes A and B on one shared store and cluster hub,
// A's first attempt write held (slow), a message allowed maxAttempts
// attempts published on jobs.run (id, of the default group's key), and
// A's receive of it begun: its answer comes on onA once the write goes on.
type lateAttemptNodes struct {
	clk    *testclock.Clock
	shared *memory.Store
	h      *hub
	slow   *slowAttempt
	a, b   *pigeon.Engine
	id     string
	key    store.GroupKey
	ra     pigeon.AttemptSettler
	onA    <-chan receivedAttempts
}

func startLateAttempt(t *testing.T, maxAttempts int) *lateAttemptNodes {
	n := &lateAttemptNodes{clk: newClock(), shared: memory.New(nil)}
	n.h = &hub{leases: map[string]*hubLease{}, now: n.clk.Now, progress: n.shared}
	n.slow = newSlowAttempt(n.shared)
	oa, ob := returnOptions(n.clk.Now, maxAttempts), returnOptions(n.clk.Now, maxAttempts)
	oa.Store, oa.Cluster = n.slow, n.h.node()
	ob.Store, ob.Cluster = viewOf(n.shared), n.h.node()
	n.a, n.b = startEngine(t, oa), startEngine(t, ob)
	n.id = publishN(t, dupConnect(t, n.b, "boss-token", "jobs.run"), dupCases[0], 0, 1)[0]
	n.key = store.GroupKey{Subject: "jobs.run", Group: pigeon.DefaultGroup}
	n.ra = dupConnect(t, n.a, "crew-token", "jobs.run").(pigeon.AttemptSettler)
	n.onA = receiveLater(n.ra)
	awaitOn(t, n.slow.entered, "node A never recorded its attempt")
	return n
}

// receivedAttempts is the answer of one ReceiveAttempts.
type receivedAttempts struct {
	msgs     []*pigeon.Message
	attempts []int
	err      error
}

// receiveLater receives from jobs.run on r in the background; the answer
// comes on the channel.
func receiveLater(r pigeon.AttemptSettler) <-chan receivedAttempts {
	ch := make(chan receivedAttempts, 1)
	go func() {
		msgs, attempts, err := r.ReceiveAttempts(context.Background(), "jobs.run", 10)
		ch <- receivedAttempts{msgs, attempts, err}
	}()
	return ch
}

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
	n := startLateAttempt(t, 2)
	clk, shared, h, slow, b, id, key, onA := n.clk, n.shared, n.h, n.slow, n.b, n.id, n.key, n.onA
	stored := func() int {
		t.Helper()
		g, err := shared.LoadGroup(context.Background(), key)
		require.NoError(t, err)
		require.Len(t, g.Attempts, 1, "one message, one attempt count")
		for _, count := range g.Attempts {
			return count
		}
		return 0
	}

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

	requireExhaustedFromTheStore(t, h, b, rb, key, id, seq)
}

// requireExhaustedFromTheStore: node B gives its attempt 2 (of 2) up (its
// consumer nacks), and the cluster's lease record of the message is gone,
// as store/jetstream's is a day after its last write: the next lease
// counts from the store, which must hold B's attempt, so the message is
// exhausted, not delivered again.
func requireExhaustedFromTheStore(t *testing.T, h *hub, b *pigeon.Engine, rb pigeon.AttemptSettler, key store.GroupKey, id string, seq uint64) {
	t.Helper()
	require.NoError(t, rb.NackAttempt(context.Background(), "jobs.run", id, seq, 2, 0))
	h.mu.Lock()
	delete(h.leases, leaseKey(key, seq))
	h.mu.Unlock()
	msgs, attempts, err := rb.ReceiveAttempts(context.Background(), "jobs.run", 10)
	require.NoError(t, err)
	require.Empty(t, msgs, "a message allowed two attempts was delivered again, as attempt %v", attempts)
	rec := auditedOf(t, b, pigeon.EventDeliveryExhausted, id) // waits for it
	require.Equal(t, string(pigeon.CodeDeliveryExhausted), rec.Code)
}
