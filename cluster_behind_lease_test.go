package pigeon_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
)

// extendingVouchingNode is a hub node that extends leases and vouches for
// how long it is current (a JetStream cluster node is both).
type extendingVouchingNode struct {
	*vouchingNode
	ext *extendingNode
}

func (n *extendingVouchingNode) Extend(ctx context.Context, key store.GroupKey, seqs []uint64, deadline time.Time) ([]uint64, error) {
	return n.ext.Extend(ctx, key, seqs, deadline)
}

// While a node's directory is behind, it extends no cluster lease of a
// running handler: it cannot tell whether the holder may still hold the
// message, and a revoked consumer must not keep it from the group's other
// consumers. The lease lapses and the group's other nodes may take it.
// Once the node is vouched for again, it extends them again.
func TestClusterLeasesAreNotExtendedWhileBehind(t *testing.T) {
	h := &hub{leases: map[string]*hubLease{}}
	hn := h.node()
	n := &extendingVouchingNode{vouchingNode: &vouchingNode{hubNode: hn}, ext: &extendingNode{hubNode: hn}}
	n.beat()
	t.Cleanup(func() { n.cut(false) })
	o := extendOptions()
	o.Store, o.Cluster = viewOf(memory.New(nil)), n
	e := startEngine(t, o)

	c := dupCases[0]
	free := holdExtendedJob(t, dupConnect(t, e, c.pub, c.subject), dupConnect(t, e, c.sub, c.subject), &n.ext.writes)

	n.cut(false)
	require.Eventually(t, func() bool {
		_, err := e.Connect(ctx, c.pub, []string{c.subject})
		return pigeon.ErrorCode(err) == pigeon.CodeStoreUnavailable
	}, 10*time.Second, 5*time.Millisecond, "the node is behind once it is no longer vouched for")
	requireExtensionPaused(t, &n.ext.writes, "a lease is extended while the directory is behind",
		n.beat, "the lease is extended again once the node is vouched for")
	free()
}

// holdExtendedJob publishes one job of dupCases[0] from pub and waits
// until consumer's handler runs it, held until free is called, and its
// lease has been extended (writes has grown).
func holdExtendedJob(t *testing.T, pub, consumer pigeon.Session, writes *atomic.Int64) (free func()) {
	t.Helper()
	c := dupCases[0]
	log, free := holdingSubscription(t, consumer, c.subject)
	id := publishN(t, pub, c, 0, 1)[0]
	waitStarted(t, log, id)
	require.Eventually(t, func() bool { return writes.Load() > 0 }, 10*time.Second, time.Millisecond, "the lease is extended while the handler runs")
	return free
}

// requireExtensionPaused requires that no lease is written for five ack
// waits (failing with while), and that one is written again once resume
// was called (failing with again).
func requireExtensionPaused(t *testing.T, writes *atomic.Int64, while string, resume func(), again string) {
	t.Helper()
	w := writes.Load()
	require.Never(t, func() bool { return writes.Load() > w }, 5*extendAck, 10*time.Millisecond, while)
	resume()
	require.Eventually(t, func() bool { return writes.Load() > w }, 10*time.Second, time.Millisecond, again)
}
