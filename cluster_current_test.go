package pigeon_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
)

// vouchingNode is a hub node whose Cluster vouches that it has heard
// every change (pigeon.ClusterCurrent) while the test lets it: a beat
// moves the moment on, a little ahead, as a Cluster whose watch is in
// touch with the others does. When the test cuts the node off, the beat
// stops (or CurrentUntil panics) and no change reaches the node.
type vouchingNode struct {
	*hubNode
	mu     sync.Mutex
	until  time.Time
	panics bool
	stop   chan struct{} // closed to stop the beat; nil while it is stopped
	beats  sync.WaitGroup
	seen   atomic.Int64 // changes applied
}

// Watch is hubNode's, counting the changes applied.
func (n *vouchingNode) Watch(ctx context.Context, fn func(pigeon.ClusterChange)) error {
	return n.hubNode.Watch(ctx, func(c pigeon.ClusterChange) {
		fn(c)
		n.seen.Add(1)
	})
}

// vouchAhead is how far ahead of each beat the node is vouched for: fifty
// beats, so that a beat the scheduler holds up on a loaded machine (the
// race detector, two cores) does not let the vouching lapse.
const vouchAhead = time.Second

func (n *vouchingNode) CurrentUntil() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.panics {
		panic("the cluster's liveness is broken")
	}
	return n.until
}

// beat vouches for the node every 20 ms until cut is called, from the
// moment it returns: an engine started right after reads the node as
// vouched for, whether or not the beating goroutine has run yet.
func (n *vouchingNode) beat() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.until = time.Now().Add(vouchAhead)
	n.stop = make(chan struct{})
	n.panics = false
	stop := n.stop
	n.beats.Add(1)
	go func() {
		defer n.beats.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			n.mu.Lock()
			n.until = time.Now().Add(vouchAhead)
			n.mu.Unlock()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
}

// cut stops the beat; panics: CurrentUntil panics from now on.
func (n *vouchingNode) cut(panics bool) {
	n.mu.Lock()
	stop := n.stop
	n.stop = nil
	n.panics = panics
	n.mu.Unlock()
	if stop != nil {
		close(stop)
	}
	n.beats.Wait()
}

// TestClusterNodeCutOffStopsAuthorizing: a node cut off from the others
// (the store unreachable from it, a watch that stalls without an error)
// is never told of their changes. A Cluster whose barrier passes over a
// node that shows no sign of life then reports a revocation done while
// that node goes on authorizing, on what it last applied, the principal
// another node cut off. Now a Cluster that vouches for how long the node
// is current (pigeon.ClusterCurrent) bounds that: once the moment it
// vouched for has passed, every authorization there is refused
// STORE_UNAVAILABLE, negotiation included, and running subscriptions
// deliver nothing (they pause); once it vouches again (having caught up),
// the node serves again on the changed directory, and a subscription it
// took nothing from goes on.
func TestClusterNodeCutOffStopsAuthorizing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		panics bool
	}{
		{"its vouching runs out", false},
		{"its vouching panics", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b *vouchingNode
			c := startNodePair(t, accessFixtureOptions, func(h *hub, view nodeStore) (store.Store, pigeon.Cluster) {
				b = &vouchingNode{hubNode: h.node()}
				b.beat()
				t.Cleanup(func() { b.cut(false) })
				return view, b
			})

			_, err := c.a.PutRole(ctx, pigeon.Role{Name: "member", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish}}}})
			require.NoError(t, err)
			_, err = c.a.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
			require.NoError(t, err)
			g, err := c.a.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
			require.NoError(t, err)
			c.announce()
			cutOff := connectEventually(t, c.b, g.Token)
			defer cutOff.Close(ctx)
			other := connectEventually(t, c.b, "bob-token", "chat.messages")
			defer other.Close(ctx)
			var delivered atomic.Int64
			sub, err := other.Subscribe(ctx, "chat.messages", func(context.Context, *pigeon.Delivery) error { delivered.Add(1); return nil })
			require.NoError(t, err)
			defer func() { _ = sub.Unsubscribe(ctx) }()
			_, err = cutOff.Publish(ctx, chatIn("lobby", "before"))
			require.NoError(t, err)

			// b is cut off: the revocation never reaches it.
			b.cut(tc.panics)
			require.NoError(t, c.a.RevokeGrant(ctx, g.JTI))

			require.Eventually(t, func() bool {
				_, err := cutOff.Publish(ctx, chatIn("lobby", "while cut off"))
				return err != nil
			}, 10*time.Second, 5*time.Millisecond, "the principal another node cut off is refused here once b is no longer vouched for")
			_, err = cutOff.Publish(ctx, chatIn("lobby", "while cut off"))
			requireCode(t, err, pigeon.CodeStoreUnavailable)
			_, err = other.Publish(ctx, chatMessage("while cut off"))
			requireCode(t, err, pigeon.CodeStoreUnavailable)
			_, err = c.b.Connect(ctx, "bob-token", []string{"chat.messages"})
			requireCode(t, err, pigeon.CodeStoreUnavailable)
			require.Never(t, func() bool { return isDone(sub) }, 200*time.Millisecond, 5*time.Millisecond,
				"a running subscription pauses rather than deliver on what b last applied; it does not end")
			c.requireLogged(t, "can no longer be sure it has heard every change")

			// b is in touch again, and catches up before it is vouched for.
			seen := b.seen.Load()
			c.announce()
			require.Eventually(t, func() bool { return b.seen.Load() > seen }, 10*time.Second, 5*time.Millisecond)
			b.beat()
			require.Eventually(t, func() bool {
				_, err := other.Publish(ctx, chatMessage("after"))
				return err == nil
			}, 10*time.Second, 5*time.Millisecond, "b serves again once it is vouched for")
			_, err = cutOff.Publish(ctx, chatIn("lobby", "after"))
			requireCode(t, err, pigeon.CodeGrantRevoked)
			require.Eventually(t, func() bool { return delivered.Load() == 1 }, 10*time.Second, 5*time.Millisecond,
				"the paused subscription goes on once b is vouched for")
			require.NoError(t, sub.Err())
			c.requireLogged(t, "has caught up with the other nodes")
		})
	}
}

// An engine whose Cluster vouches for no moment yet (or for one already
// past) authorizes nothing from the moment New returns: the first look at
// CurrentUntil is New's own, not a goroutine's that may come later.
func TestClusterNotVouchedForAuthorizesNothingFromTheStart(t *testing.T) {
	h := &hub{leases: map[string]*hubLease{}}
	n := &vouchingNode{hubNode: h.node()} // never beats: until is zero
	o := accessFixtureOptions()
	o.Store, o.Cluster = viewOf(memory.New(nil)), n
	e := startEngine(t, o)
	_, err := e.Connect(ctx, "bob-token", []string{"chat.messages"})
	requireCode(t, err, pigeon.CodeStoreUnavailable)
	n.beat()
	t.Cleanup(func() { n.cut(false) })
	connectEventually(t, e, "bob-token", "chat.messages")
}
