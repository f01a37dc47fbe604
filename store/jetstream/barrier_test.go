package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// sees reports whether c holds a fresh record of node (of a process of
// it).
func (c *Cluster) sees(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, p := range c.peers {
		if recordNode(k) == node && time.Since(p.at) <= c.s.opts.Liveness {
			return true
		}
	}
	return false
}

// TestClusterBarrier checks the bounds of a revocation's wait for the
// other nodes: a killed node holds it up no longer than the liveness
// bound, and a live node that does not confirm fails it with
// CLUSTER_UNCONFIRMED, the change made all the same.
func TestClusterBarrier(t *testing.T) {
	nc := startNATSCluster(t)
	prefix := freshPrefix()
	n1, n2 := nc.startPigeon(t, 0, prefix, nil), nc.startPigeon(t, 1, prefix, nil)
	// The barrier outwaits a killed node by the liveness bound (3 s); its
	// own timeout (5 s by default) left a busy machine 2 s for the node's
	// last beat, the reads and the rechecks, and a late one failed the
	// revocation. With 30 s the killed node still has to drop out for the
	// revocation to succeed (or it fails naming p3), and no test here
	// waits for the timeout itself: the unconfirmed case bounds its own
	// wait with a context. Only this goroutine calls Barrier.
	n1.s.opts.BarrierTimeout = 30 * time.Second
	ctx := t.Context()
	contract := func(t *testing.T) pigeon.Caller {
		sess, err := n1.e.Connect(ctx, "alice-token", []string{"chat.messages"})
		require.NoError(t, err)
		return caller(t, "alice-token", sess)
	}
	revoked := func(t *testing.T, e *pigeon.Engine, c pigeon.Caller) {
		_, err := e.Publish(ctx, c, chatMsg("lobby", "after"))
		requireCode(t, err, pigeon.CodeContractRevoked)
	}

	t.Run("KilledNodeDropsOut", func(t *testing.T) {
		child := nc.startPigeonChild(t, 2, prefix, "p3")
		require.Eventually(t, func() bool { return n1.cl.sees("p3") }, 30*time.Second, 20*time.Millisecond, "node p3 confirms")
		c := contract(t)
		child.kill()
		// p3 is waited for until its record is older than Options.Liveness
		// (3 s), then no longer: no error.
		require.NoError(t, n1.e.RevokeContract(ctx, c.Principal, c.ContractID))
		require.False(t, n1.cl.sees("p3"))
		revoked(t, n2.e, c)
	})

	t.Run("LiveNodeUnconfirmed", func(t *testing.T) {
		c := contract(t)
		// A node that shows signs of life but applies nothing.
		_, err := n1.cl.applied.Put(ctx, token("ghost"), []byte(`{"dir":0,"con":0}`))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return n1.cl.sees("ghost") }, 30*time.Second, 10*time.Millisecond)
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		err = n1.e.RevokeContract(rctx, c.Principal, c.ContractID)
		requireCode(t, err, pigeon.CodeClusterUnconfirmed)
		require.ErrorIs(t, err, pigeon.ErrStore)
		require.ErrorContains(t, err, "ghost")
		revoked(t, n1.e, c) // the change is made

		// Once the node is gone, a retry confirms.
		require.NoError(t, n1.cl.applied.Delete(ctx, token("ghost")))
		require.Eventually(t, func() bool { return !n1.cl.sees("ghost") }, 30*time.Second, 10*time.Millisecond)
		require.NoError(t, n1.e.RevokeContract(ctx, c.Principal, c.ContractID))
		revoked(t, n2.e, c)
	})

}
