package pigeon_test

import (
	"context"
	"sync"
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
	o := dupOptions()
	for j := range o.Catalog.Subjects {
		o.Catalog.Subjects[j].Delivery.AckWaitMs = extendAck.Milliseconds()
	}
	o.Store, o.Cluster = nodeStore{Store: memory.New(nil), audit: memory.New(nil)}, n
	e, err := pigeon.New(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })

	c := dupCases[0]
	pub := dupConnect(t, e, c.pub, c.subject)
	log := newRunLog()
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	sub, err := dupConnect(t, e, c.sub, c.subject).Subscribe(context.Background(), c.subject, log.holding(release))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
	t.Cleanup(free) // before the unsubscribe, which waits for the handlers
	id := publishN(t, pub, c, 0, 1)[0]
	waitStarted(t, log, id)
	require.Eventually(t, func() bool { return n.ext.writes.Load() > 0 }, 10*time.Second, time.Millisecond, "the lease is extended while the handler runs")

	n.cut(false)
	require.Eventually(t, func() bool {
		_, err := e.Connect(ctx, c.pub, []string{c.subject})
		return pigeon.ErrorCode(err) == pigeon.CodeStoreUnavailable
	}, 10*time.Second, 5*time.Millisecond, "the node is behind once it is no longer vouched for")
	w := n.ext.writes.Load()
	require.Never(t, func() bool { return n.ext.writes.Load() > w }, 5*extendAck, 10*time.Millisecond,
		"a lease is extended while the directory is behind")

	n.beat()
	require.Eventually(t, func() bool { return n.ext.writes.Load() > w }, 10*time.Second, time.Millisecond,
		"the lease is extended again once the node is vouched for")
	free()
}
