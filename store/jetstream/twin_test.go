package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
)

// TestClusterTwinNodeWaitedFor: a node skips its own record in the
// <P>_applied bucket. A second process started with the same node name
// (a copied configuration, or a replacement started while the old
// process still serves) writes its record under that name, and a
// revocation on either must still wait for the other: it is counted as
// a node of its own, and a revocation it has not applied is unconfirmed.
func TestClusterTwinNodeWaitedFor(t *testing.T) {
	srv := runServer(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s, cl := memoryNode(ctx, t, srv)
	done := make(chan struct{})
	go func() { defer close(done); _ = cl.Watch(ctx, func(pigeon.ClusterChange) {}) }()
	defer func() { cancel(); <-done }()
	require.Eventually(t, func() bool { return cl.LiveNodes() == 1 && cl.Barrier(ctx) == nil }, 10*time.Second, 10*time.Millisecond)

	// The other process "a", which applied nothing yet.
	_, err := cl.applied.Put(ctx, token("a"), []byte(`{"dir":0,"con":0}`))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return cl.LiveNodes() == 2 }, 10*time.Second, 10*time.Millisecond,
		"another process with this node name is a live node")
	require.NoError(t, s.PutContract(ctx, store.ContractRecord{ID: "c1", ExpiresAt: time.Now().Add(time.Hour), Revoked: true}))
	bctx, bcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer bcancel()
	err = cl.Barrier(bctx)
	require.Error(t, err, "the revocation did not wait for the other process")
	require.ErrorContains(t, err, "a (another process)")
}
