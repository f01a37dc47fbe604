package jetstream

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestNackedLeaseIsNotExtendedAgain: node a's push handler nacks a
// message while the engine extends the handler's leases (keepShared
// reads which leases run, then calls Extend outside its lock), so the
// nack's early release (Release, not done, retryAt) meets an Extend of
// the same lease. An Extend written after the release moved the lease
// back to a full ack wait, as the node's own lease; a release that found
// the lease changed by the Extend between its read and its write gave up
// as though another node had taken it. Either way the message waited out
// the ack wait instead of its retry time before any other node could
// take it (availability, not safety). A released lease is now marked so,
// an Extend reports it lost rather than extend it, and a release that
// finds the lease changed reads it again.
func TestNackedLeaseIsNotExtendedAgain(t *testing.T) {
	srv := runServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	prefix := freshPrefix()
	node := func(name string) *Cluster {
		_, cl := prefixNode(ctx, t, srv.ClientURL(), prefix, name)
		return cl
	}
	a, b := node("a"), node("b")
	key := store.GroupKey{Subject: "jobs", Group: "workers"}
	acquire := func(t *testing.T, seq uint64) {
		t.Helper()
		st, err := a.Acquire(ctx, key, seq, time.Now().Add(time.Minute))
		require.NoError(t, err)
		require.True(t, st.Acquired)
	}
	// takenByB: node b leases seq at once, the nack's retry time (now)
	// having passed, not a minute later.
	takenByB := func(t *testing.T, seq uint64) {
		t.Helper()
		st, err := b.Acquire(ctx, key, seq, time.Now().Add(time.Minute))
		require.NoError(t, err)
		require.True(t, st.Acquired, "node b could not lease the nacked message %d: node a holds it until %v", seq, st.Until)
	}

	t.Run("ExtendAfterRelease", func(t *testing.T) {
		acquire(t, 1)
		require.NoError(t, a.Release(ctx, key, 1, 1, false, time.Now()))
		lost, err := a.Extend(ctx, key, []uint64{1}, time.Now().Add(10*time.Minute))
		require.NoError(t, err)
		require.Equal(t, []uint64{1}, lost, "an Extend after the nack's release extended the lease")
		takenByB(t, 1)
	})

	t.Run("ExtendWhileReleasing", func(t *testing.T) {
		for seq := uint64(100); seq < 130; seq++ {
			acquire(t, seq)
			var wg sync.WaitGroup
			start := make(chan struct{})
			wg.Go(func() {
				<-start
				_, err := a.Extend(ctx, key, []uint64{seq}, time.Now().Add(10*time.Minute))
				require.NoError(t, err)
			})
			wg.Go(func() {
				<-start
				require.NoError(t, a.Release(ctx, key, seq, 1, false, time.Now()))
			})
			close(start)
			wg.Wait()
			takenByB(t, seq)
		}
	})
}
