package jetstream

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
)

// requireNotHeld requires err to be a done release's answer for a lease
// this node does not hold: ACK_NOT_ALLOWED, as the engine refuses an
// answer to a delivery whose lease was lost.
func requireNotHeld(t *testing.T, err error, msgAndArgs ...any) {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	require.Equal(t, pigeon.CodeAckNotAllowed, pigeon.ErrorCode(err), "%v", err)
}

// TestLateDoneReleaseLeavesTheNextHoldersLease: node a's lease of a
// message runs out while its handler still runs, and node b takes the
// message over and runs it. A done release was an unconditional write of
// the settled marker, so a's late answer ended b's lease: the message was
// marked settled under b while b still ran it (b's Extend then reported
// the lease lost), and a was told its answer had settled the message. A
// done release is now a compare-and-set of this node's lease: a's leaves
// b's lease as it is and reports ACK_NOT_ALLOWED; b's settles it.
func TestLateDoneReleaseLeavesTheNextHoldersLease(t *testing.T) {
	n := startTwoNodes(t)
	ctx, a, b, key := n.ctx, n.a, n.b, n.key

	st, err := a.Acquire(ctx, key, 1, time.Now().Add(200*time.Millisecond))
	require.NoError(t, err)
	require.True(t, st.Acquired)
	require.Equal(t, 1, st.Attempt)

	// b takes the message once a's lease has run out.
	bUntil := time.Now().Add(time.Minute)
	require.Eventually(t, func() bool {
		st, err = b.Acquire(ctx, key, 1, bUntil)
		require.NoError(t, err)
		return st.Acquired
	}, 10*time.Second, 10*time.Millisecond, "node b never took the lease node a let run out")
	require.Equal(t, 2, st.Attempt)

	// a's handler ends now: its answer settles nothing.
	requireNotHeld(t, a.Release(ctx, key, 1, 1, true, time.Time{}), "node a's late done release was taken as settling the message")

	// b still holds the message.
	lost, err := b.Extend(ctx, key, []uint64{1}, bUntil.Add(time.Minute))
	require.NoError(t, err)
	require.Empty(t, lost, "node a's late done release ended node b's lease")
	st, err = a.Acquire(ctx, key, 1, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.False(t, st.Done, "the message is settled while node b still runs it")
	require.False(t, st.Acquired)
	require.WithinDuration(t, bUntil.Add(time.Minute), st.Until, time.Millisecond, "node b's lease, extended")

	// b's answer settles it; a repeat is no change, and a's release is
	// still refused: b settled it, not a.
	require.NoError(t, b.Release(ctx, key, 1, 2, true, time.Time{}))
	require.NoError(t, b.Release(ctx, key, 1, 2, true, time.Time{}), "a done release repeated")
	requireNotHeld(t, a.Release(ctx, key, 1, 1, true, time.Time{}), "node a's release after node b settled the message")
	st, err = a.Acquire(ctx, key, 1, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.True(t, st.Done)
}

// TestDoneRelease: a done release settles the lease this node holds,
// also once it ran out while no other node took it, and a repeat of it
// is no change; a release of a lease this node never held writes nothing
// and settles nothing.
func TestDoneRelease(t *testing.T) {
	n := startTwoNodes(t)
	ctx, a, b, key := n.ctx, n.a, n.b, n.key

	for i, tc := range []struct {
		name string
		// lease, when set, is how long a's lease of the message lasts
		// (negative: it ran out already); none is taken otherwise.
		lease    time.Duration
		releases int
		settled  bool // the releases settle the message
	}{
		{name: "Held", lease: time.Minute, releases: 1, settled: true},
		{name: "Repeated", lease: time.Minute, releases: 3, settled: true},
		{name: "RanOutNotTaken", lease: -time.Second, releases: 1, settled: true},
		{name: "NeverLeased", releases: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seq := uint64(10 + i)
			if tc.lease != 0 {
				st, err := a.Acquire(ctx, key, seq, time.Now().Add(tc.lease))
				require.NoError(t, err)
				require.True(t, st.Acquired)
			}
			for range tc.releases {
				err := a.Release(ctx, key, seq, 1, true, time.Time{})
				if tc.settled {
					require.NoError(t, err)
				} else {
					requireNotHeld(t, err)
				}
			}
			st, err := b.Acquire(ctx, key, seq, time.Now().Add(time.Minute))
			require.NoError(t, err)
			require.Equal(t, tc.settled, st.Done, "settled")
			require.Equal(t, !tc.settled, st.Acquired, "free for another node")
		})
	}
}

// heldLeaseBehindReplica returns a store and its Cluster holding the
// lease of sequence 1 of key, whose next direct read a replica behind
// answers (lagDirect), with a context that ends with the test.
func heldLeaseBehindReplica(t *testing.T) (context.Context, *Store, *Cluster, store.GroupKey) {
	t.Helper()
	srv := runServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true, Timeout: 100 * time.Millisecond})
	require.NoError(t, err)
	c, err := NewCluster(ctx, s)
	require.NoError(t, err)
	key := store.GroupKey{Subject: "orders", Group: "billing"}
	st, err := c.Acquire(ctx, key, 1, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.True(t, st.Acquired)
	lagDirect(t, s, "KV_"+s.bucketName("leases"))
	return ctx, s, c, key
}

// TestLaggingReplicaDoneRelease: a done release whose read a replica
// behind answers (without this node's lease) reads the lease again from
// the bucket's leader, and settles it, rather than report it not held.
func TestLaggingReplicaDoneRelease(t *testing.T) {
	ctx, s, c, key := heldLeaseBehindReplica(t)

	require.NoError(t, c.Release(ctx, key, 1, 1, true, time.Time{}), "a done release after the replica behind's read")
	m, err := leaderLast(ctx, s.nc, s.bucketName("leases"), leaseKey(key, 1))
	require.NoError(t, err)
	var l leaseVal
	require.NoError(t, json.Unmarshal(m.Data, &l))
	require.True(t, l.Done, "the leader holds %+v", l)
	require.NoError(t, c.Release(ctx, key, 1, 1, true, time.Time{}), "repeated")
}
