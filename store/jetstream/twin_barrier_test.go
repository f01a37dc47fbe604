package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestTwinProcessesAreEachWaitedFor: two processes given one node name
// wrote their records in <P>_applied under one key, so another node saw
// whichever wrote last: once one of them confirmed a revocation, the
// revoking node's barrier returned while the other still honoured the
// contract (and the live nodes, which share the rate limits, counted one
// node for both). Each process now keeps a record of its own.
func TestTwinProcessesAreEachWaitedFor(t *testing.T) {
	srv := runServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	prefix := freshPrefix()
	hold := make(chan struct{})
	held := make(chan string, 16)
	_, _ = watchingNode(ctx, t, srv, prefix, "a", nil)
	_, _ = watchingNode(ctx, t, srv, prefix, "a", func(wctx context.Context, id string) {
		held <- id
		select { // this process applies the revocation late
		case <-hold:
		case <-wctx.Done():
		}
	})
	sb, b := watchingNode(ctx, t, srv, prefix, "b", nil)
	require.Eventually(t, func() bool { return b.LiveNodes() >= 2 }, 10*time.Second, 5*time.Millisecond)

	require.NoError(t, sb.PutContract(ctx, store.ContractRecord{ID: "c1", ExpiresAt: time.Now().Add(time.Hour), Revoked: true}))
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the second process was never told of the revocation")
	}
	bctx, bcancel := context.WithTimeout(ctx, 2*time.Second)
	defer bcancel()
	err := b.Barrier(bctx)
	require.Error(t, err, "the revocation returned while a process of node a had not applied it")
	require.ErrorContains(t, err, "nodes a did not confirm")
	require.Equal(t, 3, b.LiveNodes(), "two processes of node a and node b")

	close(hold)
	require.NoError(t, b.Barrier(ctx), "confirmed once both processes applied it")
}
