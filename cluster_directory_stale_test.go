package pigeon_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/transport/transporttest"
)

// readFaults makes a store view's reads fail, panic or hang, as in a
// store that is unreachable from this node.
type readFaults struct {
	mu     sync.Mutex
	fail   bool
	panics bool          // a failing read panics, as a store with a bug might
	hang   chan struct{} // not nil: a read waits until it is closed
}

var errUnreachable = errors.New("store unreachable from this node")

// set makes reads fail (and panic), or succeed again.
func (f *readFaults) set(fail, panics bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail, f.panics = fail, panics
}

// holdReads makes reads wait until the returned func is called.
func (f *readFaults) holdReads() (release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	hang := make(chan struct{})
	f.hang = hang
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			f.hang = nil
			f.mu.Unlock()
			close(hang)
		})
	}
}

// fault is what a read called what meets: it waits while reads are held,
// then panics or fails as set; nil, it goes on.
func (f *readFaults) fault(ctx context.Context, what string) error {
	f.mu.Lock()
	fail, panics, hang := f.fail, f.panics, f.hang
	f.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail && panics {
		panic(what + " failed")
	}
	if fail {
		return errUnreachable
	}
	return nil
}

// directoryReads is a node's view of the shared store whose listings of
// the directory's buckets the test can make fail, panic or hang.
type directoryReads struct {
	nodeStore
	readFaults
}

func (s *directoryReads) List(ctx context.Context, bucket string) (map[string][]byte, error) {
	if err := s.fault(ctx, "listing "+bucket); err != nil {
		return nil, err
	}
	return s.nodeStore.List(ctx, bucket)
}

// staleCluster is two nodes on one memory store: a, whose reads succeed,
// and b, whose directory reads the test controls and whose log it reads.
type staleCluster struct {
	*nodePair
	bReads *directoryReads
}

func newStaleCluster(t *testing.T) *staleCluster {
	t.Helper()
	c := &staleCluster{}
	c.nodePair = startNodePair(t, accessFixtureOptions, func(h *hub, view nodeStore) (store.Store, pigeon.Cluster) {
		c.bReads = &directoryReads{nodeStore: view}
		return c.bReads, h.node()
	})
	return c
}

// accessFixtureOptions are the options of accessFixture: the test
// catalog with rooms.chat, whose publish only a role grants, and the
// tokens of carol and dave.
func accessFixtureOptions() *pigeon.Options {
	o := transporttest.Options()
	o.Catalog.Subjects = append(o.Catalog.Subjects, pigeon.SubjectPolicy{
		Name: "rooms.chat", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"chat"},
		Policy: map[pigeon.Operation][]pigeon.RuleSpec{
			pigeon.OpReceive: {{Effect: "allow", Roles: []string{"moderator"}}},
		},
	})
	o.Authenticator = pigeon.NewStaticTokens(append(o.Authenticator.(*pigeon.StaticTokens).Tokens(),
		pigeon.StaticToken{Token: "carol-token", Principal: carol},
		pigeon.StaticToken{Token: "dave-token", Principal: dave})...)
	o.Now = nil
	return o
}

// TestClusterDirectoryBehindFailsClosed: another node takes access away
// (revokes a grant, takes a role from an account) while this node cannot
// read the directory again (the store unreachable from it, a record it
// refuses as corrupt, a read that hangs). Before, this node retried the
// reload for as long as it failed and meanwhile authorized every
// operation on its old directory: the revoked grant and the removed role
// went on publishing here. Now the directory is behind from the first
// failed read (or once a reload has run for directoryStaleAfter): every
// check that consults it is refused STORE_UNAVAILABLE, the revoked
// principal's included, and running subscriptions deliver nothing (they
// pause), until a reload succeeds; then this node recovers by itself, the
// change is in force, and a subscription it took nothing from goes on.
func TestClusterDirectoryBehindFailsClosed(t *testing.T) {
	type failure struct {
		name string
		// hangs: a change made on b waits for the reload that hangs
		// (it holds the directory's change lock) rather than fail.
		hangs  bool
		break_ func(t *testing.T, c *staleCluster) (heal func())
	}
	unreachable := failure{"the store unreachable", false, func(_ *testing.T, c *staleCluster) func() {
		c.bReads.set(true, false)
		return func() { c.bReads.set(false, false) }
	}}
	panics := failure{"a read that panics", false, func(_ *testing.T, c *staleCluster) func() {
		c.bReads.set(true, true)
		return func() { c.bReads.set(false, false) }
	}}
	corrupt := failure{"a corrupt record", false, func(t *testing.T, c *staleCluster) func() {
		// An account stored under another id: load refuses it.
		require.NoError(t, c.shared.Put(ctx, "accounts", "mallory", []byte(`{"id":"`+dave+`","createdAt":"2026-11-29T12:00:00Z","roles":["member"]}`)))
		return func() { require.NoError(t, c.shared.Delete(ctx, "accounts", "mallory")) }
	}}
	hangs := failure{"a read that hangs", true, func(t *testing.T, c *staleCluster) func() {
		release := c.bReads.holdReads()
		t.Cleanup(release)
		return release
	}}

	type change struct {
		name string
		// session connects the principal the change cuts off on b.
		session func(t *testing.T, c *staleCluster) pigeon.Session
		// take makes the change on a.
		take func(t *testing.T, c *staleCluster)
		// refused is what the cut-off principal gets once b applied it.
		refused pigeon.Code
	}
	var jti string
	revokeGrant := change{"a grant revoked", func(t *testing.T, c *staleCluster) pigeon.Session {
		g, err := c.a.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
		require.NoError(t, err)
		jti = g.JTI
		c.announce()
		return connectEventually(t, c.b, g.Token)
	}, func(t *testing.T, c *staleCluster) {
		require.NoError(t, c.a.RevokeGrant(ctx, jti))
	}, pigeon.CodeGrantRevoked}
	removeRole := change{"a role removed", func(t *testing.T, c *staleCluster) pigeon.Session {
		return connectEventually(t, c.b, "carol-token")
	}, func(t *testing.T, c *staleCluster) {
		_, err := c.a.RemoveAccountRole(ctx, carol, "member")
		require.NoError(t, err)
	}, pigeon.CodeGrantRevoked}

	for _, tc := range []struct {
		change  change
		failure failure
	}{
		{revokeGrant, unreachable},
		{removeRole, unreachable},
		{revokeGrant, corrupt},
		{removeRole, hangs},
		{revokeGrant, panics},
	} {
		t.Run(tc.change.name+" with "+tc.failure.name, func(t *testing.T) {
			c := newStaleCluster(t)
			_, err := c.a.PutRole(ctx, pigeon.Role{Name: "member", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish}}}})
			require.NoError(t, err)
			_, err = c.a.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
			require.NoError(t, err)
			// A grant nothing takes away: while b is behind, its token is
			// not worth anything there either, but it is not refused as a
			// revoked one (a client would throw a good token away).
			spare, err := c.a.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
			require.NoError(t, err)
			c.announce()
			require.NoError(t, connectEventually(t, c.b, spare.Token).Close(ctx))
			cut := tc.change.session(t, c)
			defer cut.Close(ctx)
			// bob, whom nothing was taken from, publishes on chat.messages
			// by the catalog's principal rule.
			other := connectEventually(t, c.b, "bob-token", "chat.messages")
			defer other.Close(ctx)
			var delivered atomic.Int64
			sub, err := other.Subscribe(ctx, "chat.messages", func(context.Context, *pigeon.Delivery) error { delivered.Add(1); return nil })
			require.NoError(t, err)
			defer func() { _ = sub.Unsubscribe(ctx) }()
			_, err = cut.Publish(ctx, chatIn("lobby", "before"))
			require.NoError(t, err)
			_, err = other.Publish(ctx, chatMessage("before"))
			require.NoError(t, err)

			heal := tc.failure.break_(t, c)
			tc.change.take(t, c)
			c.announce()

			require.Eventually(t, func() bool {
				_, err := cut.Publish(ctx, chatIn("lobby", "while behind"))
				return err != nil
			}, 10*time.Second, 5*time.Millisecond, "the principal another node cut off is refused here while the change is not applied")
			_, err = cut.Publish(ctx, chatIn("lobby", "while behind"))
			requireCode(t, err, pigeon.CodeStoreUnavailable)
			_, err = other.Publish(ctx, chatMessage("while behind"))
			requireCode(t, err, pigeon.CodeStoreUnavailable)
			_, err = c.b.Connect(ctx, "bob-token", []string{"chat.messages"})
			requireCode(t, err, pigeon.CodeStoreUnavailable)
			_, err = c.b.Connect(ctx, spare.Token, []string{"rooms.chat"})
			requireCode(t, err, pigeon.CodeStoreUnavailable)
			c.requireLogged(t, "access directory is behind")
			require.Never(t, func() bool { return isDone(sub) }, 200*time.Millisecond, 5*time.Millisecond,
				"a running subscription pauses rather than deliver on the old directory; it does not end")

			if !tc.failure.hangs {
				// b's copy of carol's account is the old one: storing it
				// with a role added would give back what a took away.
				_, err = c.b.AddAccountRole(ctx, carol, "moderator")
				requireCode(t, err, pigeon.CodeStoreUnavailable)
			}

			heal()
			require.Eventually(t, func() bool {
				_, err := other.Publish(ctx, chatMessage("after"))
				return err == nil
			}, 30*time.Second, 10*time.Millisecond, "the node recovers by itself once a reload succeeds")
			_, err = cut.Publish(ctx, chatIn("lobby", "after"))
			requireCode(t, err, tc.change.refused)
			require.Eventually(t, func() bool { return delivered.Load() == 2 }, 10*time.Second, 5*time.Millisecond,
				"the paused subscription goes on once the node caught up")
			require.NoError(t, sub.Err())
			c.requireLogged(t, "access directory caught up")
			a, err := c.a.GetAccount(ctx, carol)
			require.NoError(t, err)
			require.NotContains(t, a.Roles, "moderator")
		})
	}
}

// isDone reports whether sub has ended.
func isDone(sub pigeon.Subscription) bool {
	select {
	case <-sub.Done():
		return true
	default:
		return false
	}
}

// connectEventually connects credential to b for subjects (rooms.chat by
// default) once b has applied the directory changes that allow it.
func connectEventually(t *testing.T, e *pigeon.Engine, credential string, subjects ...string) pigeon.Session {
	t.Helper()
	if len(subjects) == 0 {
		subjects = []string{"rooms.chat"}
	}
	var s pigeon.Session
	require.Eventually(t, func() bool {
		var err error
		s, err = e.Connect(ctx, credential, subjects)
		return err == nil
	}, 10*time.Second, 5*time.Millisecond)
	return s
}
