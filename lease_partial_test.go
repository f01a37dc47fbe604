package pigeon_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
)

// attemptFailingStore refuses, once, to record the first attempt of one
// sequence (a replicated store without quorum for a moment).
type attemptFailingStore struct {
	store.Store
	seq    uint64
	failed atomic.Bool
}

func (s *attemptFailingStore) MarkAttempt(ctx context.Context, key store.GroupKey, seq uint64, n int) error {
	if seq == s.seq && !s.failed.Swap(true) {
		return store.ErrNoQuorum
	}
	return s.Store.MarkAttempt(ctx, key, seq, n)
}

// strandedLeases publishes two tasks on tasks.run (an ack wait of an
// hour, on a clock that does not move) to a store that refuses, once, to
// record the first attempt of the second; it returns the store, alice's
// session and the tasks' ids.
func strandedLeases(t *testing.T) (*attemptFailingStore, pigeon.Session, []string) {
	t.Helper()
	st := &attemptFailingStore{Store: memory.New(nil), seq: 2}
	f := evictFixture(t, func(o *pigeon.Options) {
		o.Store = st
		for i := range o.Catalog.Subjects {
			if s := &o.Catalog.Subjects[i]; s.Name == "tasks.run" {
				s.Delivery.AckWaitMs = time.Hour.Milliseconds()
			}
		}
	})
	boss := f.connect("boss-token", "tasks.run")
	alice := f.connect("alice-token", "tasks.run")
	return st, alice, publishTasks(t, boss, 1, 2)
}

// TestLeasesTakenBeforeAStoreFailureGoBackUncounted: a subscription's
// batch of leases that the store failed part-way (the attempt of its
// second message not recorded) gives back what it had leased before the
// failure, uncounted, at once. Before, the first message stayed leased to
// the subscription, its handler never called, until its ack wait passed
// (here, on a clock that does not move, never), and its attempt was spent
// (a message with one attempt allowed would have been exhausted unread).
func TestLeasesTakenBeforeAStoreFailureGoBackUncounted(t *testing.T) {
	st, alice, ids := strandedLeases(t)

	var (
		mu       sync.Mutex
		attempts = map[string][]int{}
	)
	sub, err := alice.Subscribe(ctx, "tasks.run", func(_ context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		attempts[d.Message.ID] = append(attempts[d.Message.ID], d.Attempt)
		mu.Unlock()
		return nil
	}, pigeon.WithMaxInFlight(2))
	require.NoError(t, err)
	defer func() { require.NoError(t, sub.Unsubscribe(ctx)) }()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(attempts) == 2
	}, 10*time.Second, time.Millisecond, "both tasks handled, the one leased before the failure included")
	require.True(t, st.failed.Load(), "the store's failure was met")
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		require.Equal(t, []int{1}, attempts[id], "message %s: handed over once, as its first attempt", id)
	}
}

// TestPulledLeasesTakenBeforeAStoreFailureGoBackUncounted: the same for a
// pull receive: the call fails, and what it had leased before the store
// failed is not held for the caller until its ack wait, but offered again
// at once, as its first attempt.
func TestPulledLeasesTakenBeforeAStoreFailureGoBackUncounted(t *testing.T) {
	_, alice, ids := strandedLeases(t)
	_, err := alice.Receive(ctx, "tasks.run", 2)
	require.Equal(t, pigeon.CodeStoreNoQuorum, pigeon.ErrorCode(err))
	got, err := alice.Receive(ctx, "tasks.run", 2)
	require.NoError(t, err)
	require.Len(t, got, 2, "the message leased before the failure is offered again at once")
	for i, m := range got {
		require.Equal(t, ids[i], m.ID)
	}
}
