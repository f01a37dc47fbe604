package jetstream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestALateReleaseLeavesTheNextLeaseAlone: the engine releases a lease
// once it has let go of the group's lock, and meanwhile it may lease the
// message again, here on the same node, as the next attempt. Release
// checked the holder, not the attempt, so the late release of attempt 1
// ended attempt 2 (marked released, due at once: another node took the
// message while this node's consumer ran it), or settled it when done. A
// release now names its attempt: one of attempt 1 leaves attempt 2 as it
// is, written nothing, and is refused ACK_NOT_ALLOWED, as a Return; a
// release of attempt 2 ends it.
func TestALateReleaseLeavesTheNextLeaseAlone(t *testing.T) {
	n := startTwoNodes(t)
	ctx, sa, a, b, key := n.ctx, n.sa, n.a, n.b, n.key

	for i, tc := range []struct {
		name string
		done bool
	}{
		{"NotDone", false},
		{"Done", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seq := uint64(10 + i)
			until := time.Now().Add(time.Minute)
			for want := 1; want <= 2; want++ { // leased again by its node: the next attempt
				st, err := a.Acquire(ctx, key, seq, until)
				require.NoError(t, err)
				require.True(t, st.Acquired)
				require.Equal(t, want, st.Attempt)
			}
			before, rev := leaseEntry(ctx, t, sa, key, seq)

			requireNotHeld(t, a.Release(ctx, key, seq, 1, tc.done, time.Now()), "the late release of attempt 1")
			after, revAfter := leaseEntry(ctx, t, sa, key, seq)
			require.Equal(t, rev, revAfter, "the late release of attempt 1 was written: %s, then %s", before, after)
			st, err := b.Acquire(ctx, key, seq, time.Now().Add(time.Minute))
			require.NoError(t, err)
			require.False(t, st.Acquired, "another node took the message node a holds as attempt 2")
			require.False(t, st.Done, "the late release of attempt 1 settled attempt 2")
			require.WithinDuration(t, until, st.Until, time.Millisecond)

			require.NoError(t, a.Release(ctx, key, seq, 2, tc.done, time.Now()))
			st, err = b.Acquire(ctx, key, seq, time.Now().Add(time.Minute))
			require.NoError(t, err)
			require.Equal(t, tc.done, st.Done, "settled")
			require.Equal(t, !tc.done, st.Acquired, "free for another node")
		})
	}
}

// TestReleaseOfAnotherNodesLease: a release that is not done, of a lease
// another node holds (taken after this node's ran out), writes nothing
// and is refused ACK_NOT_ALLOWED, as a done one is; one repeated after
// this node's own release is no change.
func TestReleaseOfAnotherNodesLease(t *testing.T) {
	n := startTwoNodes(t)
	ctx, sa, a, b, key := n.ctx, n.sa, n.a, n.b, n.key

	st, err := a.Acquire(ctx, key, 1, time.Now().Add(-time.Second)) // ran out
	require.NoError(t, err)
	require.Equal(t, 1, st.Attempt)
	st, err = b.Acquire(ctx, key, 1, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, 2, st.Attempt)
	_, rev := leaseEntry(ctx, t, sa, key, 1)
	requireNotHeld(t, a.Release(ctx, key, 1, 1, false, time.Now()))
	_, revAfter := leaseEntry(ctx, t, sa, key, 1)
	require.Equal(t, rev, revAfter, "node a's release wrote node b's lease")

	retryAt := time.Now()
	require.NoError(t, b.Release(ctx, key, 1, 2, false, retryAt))
	_, rev = leaseEntry(ctx, t, sa, key, 1)
	require.NoError(t, b.Release(ctx, key, 1, 2, false, retryAt), "a release repeated")
	_, revAfter = leaseEntry(ctx, t, sa, key, 1)
	require.Equal(t, rev, revAfter, "a release repeated was written again")
}
