package pigeon_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testlog"
	"pigeon/store"
	"pigeon/store/memory"
)

// startEngine starts an engine on o and shuts it down when the test ends.
func startEngine(t *testing.T, o *pigeon.Options) *pigeon.Engine {
	t.Helper()
	e, err := pigeon.New(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	return e
}

// viewOf is a node's view of the shared store, with its own audit log.
func viewOf(shared *memory.Store) nodeStore {
	return nodeStore{Store: shared, audit: memory.New(nil)}
}

// nodePair is two engines on one memory store, joined by a hub: a, whose
// reads succeed, and b, whose view of the store and whose Cluster node
// the test picks, and whose log it reads.
type nodePair struct {
	h      *hub
	shared *memory.Store
	a, b   *pigeon.Engine
	aNode  *hubNode
	bLog   *testlog.Buffer
}

// startNodePair starts a and b, each on the options options makes; bNode
// makes b's store (from its view of the shared one) and its node of h.
func startNodePair(t *testing.T, options func() *pigeon.Options, bNode func(h *hub, view nodeStore) (store.Store, pigeon.Cluster)) *nodePair {
	t.Helper()
	p := &nodePair{h: &hub{leases: map[string]*hubLease{}}, shared: memory.New(nil), bLog: &testlog.Buffer{}}
	oa := options()
	p.aNode = p.h.node()
	oa.Store, oa.Cluster = viewOf(p.shared), p.aNode
	ob := options()
	ob.Store, ob.Cluster = bNode(p.h, viewOf(p.shared))
	ob.Logger = p.bLog.Logger()
	p.a = startEngine(t, oa)
	p.b = startEngine(t, ob)
	return p
}

// announce tells b of a directory change a made, as a's Cluster would.
func (p *nodePair) announce() {
	p.h.broadcast(p.aNode, pigeon.ClusterChange{Kind: pigeon.ChangeDirectory})
}

// requireLogged waits until b logged text: a state change is logged just
// after it takes effect.
func (p *nodePair) requireLogged(t *testing.T, text string) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(p.bLog.String(), text) }, 10*time.Second, 5*time.Millisecond, "%s", p.bLog.String())
}
