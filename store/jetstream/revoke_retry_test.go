package jetstream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestRevocationRetriedOnANodeThatReadItWaitsForIt: a revocation whose
// barrier failed CLUSTER_UNCONFIRMED (node c lags) is retried through a
// balancer on node b, which has not cached the contract and whose watch
// has not delivered the revocation yet (here: it is still busy with an
// earlier change). b loads the contract from the store, finds it
// revoked, writes nothing, and waits at its barrier. That barrier waited
// only for what b wrote (nothing) and what its watch had read (the
// earlier change), which c had applied: the retry answered confirmed
// while c still honoured the contract. A revocation a node reads now
// counts as one it knows of, so the retry waits for c, and is confirmed
// once c has applied it.
func TestRevocationRetriedOnANodeThatReadItWaitsForIt(t *testing.T) {
	srv := runServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	prefix := freshPrefix()
	// The revoking node: a store alone, so that the only records node b
	// waits for are c's.
	sa, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: prefix, Node: "a", Memory: true})
	require.NoError(t, err)
	busy, release := make(chan struct{}), make(chan struct{})
	sb, b := watchingNode(ctx, t, srv, prefix, "b", func(wctx context.Context, id string) {
		if id != "c0" {
			return
		}
		close(busy)
		select { // b's watch holds here: nothing after c0 reaches it
		case <-release:
		case <-wctx.Done():
		}
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	// Node c has applied every contract change up to the earlier one
	// (c0), not the revocation retried (c1).
	last, err := lastRevision(ctx, sa.contracts)
	require.NoError(t, err)
	r0 := last + 1
	putC := func(con uint64) {
		t.Helper()
		_, err := b.applied.Put(ctx, token("c"), fmt.Appendf(nil, `{"dir":1000000,"con":%d}`, con))
		require.NoError(t, err)
	}
	putC(r0)
	require.Eventually(t, func() bool {
		late, _ := b.lagging(appliedRevs{Con: r0})
		return b.LiveNodes() == 2 && len(late) == 0
	}, 10*time.Second, 5*time.Millisecond, "node b never read node c's record")

	require.NoError(t, sa.PutContract(ctx, store.ContractRecord{ID: "c0", ExpiresAt: time.Now().Add(time.Hour), Revoked: true}))
	select {
	case <-busy:
	case <-ctx.Done():
		t.Fatal("node b's watch never delivered c0")
	}
	require.NoError(t, sa.PutContract(ctx, store.ContractRecord{ID: "c1", ExpiresAt: time.Now().Add(time.Hour), Revoked: true}))
	r1, err := lastRevision(ctx, sa.contracts)
	require.NoError(t, err)
	require.Greater(t, r1, r0)

	// The retry on b: the engine loads the contract it has not cached.
	rec, err := sb.GetContract(ctx, "c1")
	require.NoError(t, err)
	require.True(t, rec.Revoked)
	bctx, bcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer bcancel()
	err = b.Barrier(bctx)
	require.Error(t, err, "a retry on node b answered confirmed while node c has not applied the revocation")
	require.ErrorContains(t, err, "nodes c did not confirm")

	// Once c has applied it, the retry is confirmed.
	close(release)
	putC(r1)
	require.NoError(t, b.Barrier(ctx))
}
