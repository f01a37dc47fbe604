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

// TestRevocationBeforeTheFirstWatchIsApplied: an engine serves as soon as
// it is built, and its Cluster's watch starts a moment later. The watch
// began with the contract changes made from then on and counted every
// earlier one as applied, so a contract the engine loaded in between,
// then revoked on another node before the watch began, was never revoked
// on this node: it honoured the contract until it expired, and confirmed
// the revocation, so the revoking call returned as if every node had
// applied it. The first watch now reports every contract change made
// since the Cluster was created (before the engine could load any), and
// confirms only those.
func TestRevocationBeforeTheFirstWatchIsApplied(t *testing.T) {
	srv := runServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	prefix := freshPrefix()
	open := func(node string) (*Store, *Cluster) { return prefixNode(ctx, t, srv.ClientURL(), prefix, node) }
	sa, _ := open("a")
	require.NoError(t, sa.PutContract(ctx, store.ContractRecord{ID: "old", ExpiresAt: time.Now().Add(time.Hour), Revoked: true}))

	// Node b is built; its engine loads contract c1 and serves it.
	sb, b := open("b")
	require.NoError(t, sa.PutContract(ctx, store.ContractRecord{ID: "c1", ExpiresAt: time.Now().Add(time.Hour)}))
	rec, err := sb.GetContract(ctx, "c1")
	require.NoError(t, err)
	require.False(t, rec.Revoked)
	// Node a revokes it before b's watch begins.
	require.NoError(t, sa.PutContract(ctx, store.ContractRecord{ID: "c1", ExpiresAt: time.Now().Add(time.Hour), Revoked: true}))
	last, err := lastRevision(ctx, sa.contracts)
	require.NoError(t, err)

	revoked := make(chan string, 16)
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.Watch(wctx, func(c pigeon.ClusterChange) {
			if c.Kind == pigeon.ChangeContract {
				revoked <- c.ContractID
			}
		})
	}()
	defer func() { wcancel(); <-done }()

	// Once b says it applied the revocation, it has been told of it (fn
	// runs before the record that confirms it is written).
	require.Eventually(t, func() bool {
		e, err := b.applied.Get(ctx, b.recordKey())
		if err != nil {
			return false
		}
		var r appliedRevs
		require.NoError(t, json.Unmarshal(e.Value(), &r))
		return r.Con >= last
	}, 10*time.Second, 5*time.Millisecond, "node b never confirmed the revocation")
	var got []string
	for len(revoked) > 0 {
		got = append(got, <-revoked)
	}
	require.Equal(t, []string{"c1"}, got, "node b confirmed a revocation it never applied, or was told of one made before it was built")
}
