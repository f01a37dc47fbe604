package pigeon_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/store/wal"
)

// sharedView is a node's view of a store that nodes share: everything
// shared but the audit log, which is the node's own chain. A test can
// make the next swap of a bucket run a change of another node first
// (beforeSwap), as if that node's write had landed in between.
type sharedView struct {
	store.Store
	audit *memory.Store

	mu    sync.Mutex
	hooks map[string]func()
}

// beforeSwap runs fn once, before the next swap of bucket.
func (v *sharedView) beforeSwap(bucket string, fn func()) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.hooks == nil {
		v.hooks = map[string]func(){}
	}
	v.hooks[bucket] = fn
}

func (v *sharedView) Swap(ctx context.Context, bucket, key string, old, val []byte) error {
	v.mu.Lock()
	fn := v.hooks[bucket]
	delete(v.hooks, bucket)
	v.mu.Unlock()
	if fn != nil {
		fn()
	}
	return v.Store.(store.KVSwapper).Swap(ctx, bucket, key, old, val)
}

func (v *sharedView) AppendAudit(ctx context.Context, recs ...store.AuditRecord) error {
	return v.audit.AppendAudit(ctx, recs...)
}

func (v *sharedView) ReadAudit(ctx context.Context, from uint64, limit int) ([]store.AuditRecord, error) {
	return v.audit.ReadAudit(ctx, from, limit)
}

func (v *sharedView) AuditHead(ctx context.Context) (store.AuditRecord, store.Checkpoint, error) {
	return v.audit.AuditHead(ctx)
}

// sharedStores are the stores the nodes of these tests share.
var sharedStores = []struct {
	name string
	open func(t *testing.T) store.Store
}{
	{"memory", func(*testing.T) store.Store { return memory.New(nil) }},
	{"wal", func(t *testing.T) store.Store {
		ws, err := wal.Open(t.TempDir(), nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, ws.Close(context.Background())) })
		return ws
	}},
}

// unheardNodes is nodes a and b on one shared store, joined by a hub:
// neither hears of the other's directory changes until the test tells
// it, so that a change on one node meets a store the other changed a
// moment ago.
type unheardNodes struct {
	shared       store.Store
	h            *hub
	aNode, bNode *hubNode
	aView        *sharedView
	a, b         *pigeon.Engine
}

// startUnheard starts a and b on a store of kind open; aNow and bNow are
// their clocks (nil: the system's).
func startUnheard(t *testing.T, open func(t *testing.T) store.Store, aNow, bNow func() time.Time) *unheardNodes {
	t.Helper()
	n := &unheardNodes{shared: open(t), h: &hub{leases: map[string]*hubLease{}}}
	n.aNode, n.bNode = n.h.node(), n.h.node()
	n.aView = &sharedView{Store: n.shared, audit: memory.New(nil)}
	oa := accessFixtureOptions()
	oa.Store, oa.Cluster, oa.Now = n.aView, n.aNode, aNow
	n.a = startEngine(t, oa)
	ob := accessFixtureOptions()
	ob.Store, ob.Cluster, ob.Now = &sharedView{Store: n.shared, audit: memory.New(nil)}, n.bNode, bNow
	n.b = startEngine(t, ob)
	return n
}

// startOn starts a node that reads the shared store at start and hears
// of nothing after, with clock now (nil: the system's).
func (n *unheardNodes) startOn(t *testing.T, now func() time.Time) *pigeon.Engine {
	t.Helper()
	o := accessFixtureOptions()
	o.Store, o.Now = &sharedView{Store: n.shared, audit: memory.New(nil)}, now
	return startEngine(t, o)
}

// tellB tells b of a's changes, and waits until b's accounts and roles
// are a's; tellA the other way round.
func (n *unheardNodes) tellB(t *testing.T) { t.Helper(); n.tell(t, n.aNode, n.a, n.b) }
func (n *unheardNodes) tellA(t *testing.T) { t.Helper(); n.tell(t, n.bNode, n.b, n.a) }

func (n *unheardNodes) tell(t *testing.T, from *hubNode, changed, told *pigeon.Engine) {
	t.Helper()
	n.h.broadcast(from, pigeon.ClusterChange{Kind: pigeon.ChangeDirectory})
	require.Eventually(t, func() bool {
		return equalJSON(changed.ListAccounts(ctx), told.ListAccounts(ctx)) && equalJSON(changed.ListRoles(ctx), told.ListRoles(ctx))
	}, 10*time.Second, 5*time.Millisecond, "the node was not told")
}

// fixedClock is a clock that reads at.
func fixedClock(at time.Time) func() time.Time { return func() time.Time { return at } }

// TestDirectoryChangeOfWhatThisNodeHasNotHeardOf: node a creates an
// account, a role or a grant, and node b, not yet told, is asked to
// change or delete it (or to create an account a deleted). Before, b
// answered from its own copy without looking in the store: NOT_FOUND (a
// role, account or grant created elsewhere a moment ago could not be
// deleted, changed or revoked there until its watch delivered it), or
// CONFLICT for an account a had deleted. Now b looks in the store first,
// reads the directory again when the record is there (or gone), and
// makes the change on what it read.
func TestDirectoryChangeOfWhatThisNodeHasNotHeardOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		// onA is a's change, which b is not told of; it returns the
		// grant it issued, if any.
		onA func(t *testing.T, n *unheardNodes) pigeon.GrantToken
		// onB is b's change, asked of what a changed.
		onB func(t *testing.T, n *unheardNodes, g pigeon.GrantToken) error
		// check checks the store afterwards.
		check func(t *testing.T, n *unheardNodes, g pigeon.GrantToken)
	}{
		{
			name: "a role defined elsewhere deleted",
			onA: func(t *testing.T, n *unheardNodes) pigeon.GrantToken {
				_, err := n.a.PutRole(ctx, pigeon.Role{Name: "guest", Permissions: []pigeon.Permission{}})
				require.NoError(t, err)
				return pigeon.GrantToken{}
			},
			onB: func(_ *testing.T, n *unheardNodes, _ pigeon.GrantToken) error { return n.b.DeleteRole(ctx, "guest") },
			check: func(t *testing.T, n *unheardNodes, _ pigeon.GrantToken) {
				_, err := n.shared.Get(ctx, "roles", "guest")
				require.ErrorIs(t, err, store.ErrNotFound)
			},
		},
		{
			name: "an account created elsewhere deleted",
			onA:  createDave,
			onB:  func(_ *testing.T, n *unheardNodes, _ pigeon.GrantToken) error { return n.b.DeleteAccount(ctx, dave) },
			check: func(t *testing.T, n *unheardNodes, _ pigeon.GrantToken) {
				_, ok := accountInStore(t, n.shared, dave)
				require.False(t, ok)
			},
		},
		{
			name: "a role given to an account created elsewhere",
			onA:  createDave,
			onB: func(_ *testing.T, n *unheardNodes, _ pigeon.GrantToken) error {
				_, err := n.b.AddAccountRole(ctx, dave, "extra")
				return err
			},
			check: func(t *testing.T, n *unheardNodes, _ pigeon.GrantToken) {
				a, ok := accountInStore(t, n.shared, dave)
				require.True(t, ok)
				require.Equal(t, []string{"extra", "member"}, a.Roles)
			},
		},
		{
			name: "a role taken from an account created elsewhere",
			onA:  createDave,
			onB: func(_ *testing.T, n *unheardNodes, _ pigeon.GrantToken) error {
				_, err := n.b.RemoveAccountRole(ctx, dave, "member")
				return err
			},
			check: func(t *testing.T, n *unheardNodes, _ pigeon.GrantToken) {
				a, ok := accountInStore(t, n.shared, dave)
				require.True(t, ok)
				require.Empty(t, a.Roles)
			},
		},
		{
			name: "keys put on an account created elsewhere",
			onA:  createDave,
			onB: func(_ *testing.T, n *unheardNodes, _ pigeon.GrantToken) error {
				_, err := n.b.PutAccountKeys(ctx, dave, nil)
				return err
			},
			check: func(t *testing.T, n *unheardNodes, _ pigeon.GrantToken) {
				_, ok := accountInStore(t, n.shared, dave)
				require.True(t, ok)
			},
		},
		{
			name: "a grant issued to an account created elsewhere",
			onA:  createDave,
			onB: func(t *testing.T, n *unheardNodes, _ pigeon.GrantToken) error {
				g, err := n.b.IssueGrant(ctx, dave, []string{"member"}, time.Hour)
				if err == nil {
					_, err := n.b.Authenticate(ctx, g.Token)
					require.NoError(t, err, "the grant is good where it was issued")
				}
				return err
			},
		},
		{
			name: "a grant issued elsewhere revoked",
			onA: func(t *testing.T, n *unheardNodes) pigeon.GrantToken {
				g, err := n.a.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
				require.NoError(t, err)
				return g
			},
			onB: func(_ *testing.T, n *unheardNodes, g pigeon.GrantToken) error {
				return n.b.RevokeGrant(ctx, g.JTI)
			},
			check: func(t *testing.T, n *unheardNodes, g pigeon.GrantToken) {
				_, err := n.b.Authenticate(ctx, g.Token)
				requireCode(t, err, pigeon.CodeUnauthenticated)
				_, err = n.startOn(t, nil).Authenticate(ctx, g.Token)
				requireCode(t, err, pigeon.CodeUnauthenticated)
			},
		},
		{
			name: "an account deleted elsewhere created again",
			onA: func(t *testing.T, n *unheardNodes) pigeon.GrantToken {
				require.NoError(t, n.a.DeleteAccount(ctx, carol))
				return pigeon.GrantToken{}
			},
			onB: func(_ *testing.T, n *unheardNodes, _ pigeon.GrantToken) error {
				_, err := n.b.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"extra"}})
				return err
			},
			check: func(t *testing.T, n *unheardNodes, _ pigeon.GrantToken) {
				a, ok := accountInStore(t, n.shared, carol)
				require.True(t, ok)
				require.Equal(t, []string{"extra"}, a.Roles)
			},
		},
	} {
		for _, kind := range sharedStores {
			t.Run(tc.name+" on "+kind.name, func(t *testing.T) {
				n := startUnheard(t, kind.open, nil, nil)
				chatRoles(t, n.a)
				_, err := n.a.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
				require.NoError(t, err)
				n.tellB(t)

				g := tc.onA(t, n)
				require.NoError(t, tc.onB(t, n, g), "b answered from its copy without looking in the store")
				if tc.check != nil {
					tc.check(t, n, g)
				}
				n.tellA(t) // both nodes agree
			})
		}
	}
}

// createDave creates dave, with the role member, on a.
func createDave(t *testing.T, n *unheardNodes) pigeon.GrantToken {
	t.Helper()
	_, err := n.a.CreateAccount(ctx, pigeon.Account{ID: dave, Roles: []string{"member"}})
	require.NoError(t, err)
	return pigeon.GrantToken{}
}

// TestDirectoryRevokeOfGrantNoStoreHolds: a revocation is written only for
// a grant the store holds. Before, a node that held a grant another node
// had since forgotten (its account deleted) wrote a revocation for it and
// answered as if it had revoked it. Now it reads the store first and
// answers NOT_FOUND, writing nothing; a jti never issued (made up, or not
// even a valid id) is NOT_FOUND and leaves no record either.
func TestDirectoryRevokeOfGrantNoStoreHolds(t *testing.T) {
	for _, kind := range sharedStores {
		t.Run(kind.name, func(t *testing.T) {
			n := startUnheard(t, kind.open, nil, nil)
			chatRoles(t, n.a)
			_, err := n.a.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
			require.NoError(t, err)
			g, err := n.a.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
			require.NoError(t, err)
			n.tellB(t)
			_, err = n.b.Authenticate(ctx, g.Token)
			require.NoError(t, err, "b holds the grant")

			require.NoError(t, n.a.DeleteAccount(ctx, carol))
			requireCode(t, n.b.RevokeGrant(ctx, g.JTI), pigeon.CodeNotFound)
			for _, jti := range []string{"gr_00000000000000000000000000000000", "gr_" + strings.Repeat("0", 600), "no such grant"} {
				requireCode(t, n.b.RevokeGrant(ctx, jti), pigeon.CodeNotFound)
			}
			revoked, err := n.shared.List(ctx, "grants.revoked")
			require.NoError(t, err)
			require.Empty(t, revoked, "a revocation was written for a grant no store holds")
		})
	}
}

// TestDirectoryGrantIssuedElsewhereFollowsItsAccount: node a issues a
// grant, and node b, not yet told of it, deletes its account or takes
// one of its roles from the account. Before, b changed the grants it
// held only: the grant stayed in the store, an orphan of a deleted
// account until it expired, or with the role taken from its account, in
// force again once the role was given back. Now b, once the account is
// stored, makes the same change of every grant the store holds for the
// account.
func TestDirectoryGrantIssuedElsewhereFollowsItsAccount(t *testing.T) {
	for _, kind := range sharedStores {
		t.Run("account deleted on "+kind.name, func(t *testing.T) {
			n := startUnheard(t, kind.open, nil, nil)
			chatRoles(t, n.a)
			_, err := n.a.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
			require.NoError(t, err)
			n.tellB(t)
			g, err := n.a.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
			require.NoError(t, err)

			require.NoError(t, n.b.DeleteAccount(ctx, carol))
			_, ok := grantRolesInStore(t, n.shared, g.JTI)
			require.False(t, ok, "the grant of the deleted account was left in the store")
		})
		t.Run("role taken on "+kind.name, func(t *testing.T) {
			n := startUnheard(t, kind.open, nil, nil)
			chatRoles(t, n.a)
			_, err := n.a.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member", "extra"}})
			require.NoError(t, err)
			n.tellB(t)
			g, err := n.a.IssueGrant(ctx, carol, []string{"member", "extra"}, time.Hour)
			require.NoError(t, err)

			_, err = n.b.RemoveAccountRole(ctx, carol, "extra")
			require.NoError(t, err)
			roles, ok := grantRolesInStore(t, n.shared, g.JTI)
			require.True(t, ok)
			require.Equal(t, []string{"member"}, roles, "the grant kept the role taken from its account")

			_, err = n.b.AddAccountRole(ctx, carol, "extra")
			require.NoError(t, err)
			p, err := n.startOn(t, nil).Authenticate(ctx, g.Token)
			require.NoError(t, err)
			require.Equal(t, []string{"member"}, p.Roles, "the role given back is in force for the grant issued before it was taken")
		})
	}
}

// TestDirectoryGrantWrittenAsItsAccountChanges: node b deletes an
// account, or takes a role from it, in the moment node a writes a grant
// for it: after a read the account, before its grant is stored. b cannot
// know of the grant (it is not written yet) and a read the account as it
// was. Before, the grant was stored anyway: an orphan of the deleted
// account, or carrying the role taken away. Now a reads the account again
// once the grant is written, takes the grant back, and issues it once
// more on what it reads: NOT_FOUND for the deleted account; without the
// role for the other.
func TestDirectoryGrantWrittenAsItsAccountChanges(t *testing.T) {
	for _, kind := range sharedStores {
		t.Run("account deleted on "+kind.name, func(t *testing.T) {
			n := startUnheard(t, kind.open, nil, nil)
			chatRoles(t, n.a)
			_, err := n.a.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
			require.NoError(t, err)
			n.tellB(t)
			n.aView.beforeSwap("grants", func() { require.NoError(t, n.b.DeleteAccount(ctx, carol)) })

			_, err = n.a.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
			requireCode(t, err, pigeon.CodeNotFound)
			grants, err := n.shared.List(ctx, "grants")
			require.NoError(t, err)
			require.Empty(t, grants, "a grant of the deleted account was left in the store")
		})
		t.Run("role taken on "+kind.name, func(t *testing.T) {
			n := startUnheard(t, kind.open, nil, nil)
			chatRoles(t, n.a)
			_, err := n.a.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member", "extra"}})
			require.NoError(t, err)
			n.tellB(t)
			n.aView.beforeSwap("grants", func() {
				_, err := n.b.RemoveAccountRole(ctx, carol, "extra")
				require.NoError(t, err)
			})

			g, err := n.a.IssueGrant(ctx, carol, []string{"member", "extra"}, time.Hour)
			require.NoError(t, err)
			roles, ok := grantRolesInStore(t, n.shared, g.JTI)
			require.True(t, ok)
			require.Equal(t, []string{"member"}, roles, "the grant carries the role taken from its account")
		})
	}
}

// TestAccountCreatedAgainHonoursNoGrantOfItsPredecessor: an account is
// deleted while a grant of it, issued on another node a moment before,
// is left in the store; a node that never held the account (started
// since) creates the account again under its id, its clock a minute
// behind the node that created the last account before. Before, that
// node stamped the new account with the CreatedAt of the deleted one (a
// nanosecond past the latest it held, as the node that created the old
// account had), and the grant issued to the deleted account authenticated
// as the new one. Now the store keeps the latest CreatedAt it gave: the
// new account is created after every account of its id before it, and
// the old grant is worth nothing (and no longer stored).
func TestAccountCreatedAgainHonoursNoGrantOfItsPredecessor(t *testing.T) {
	for _, kind := range sharedStores {
		t.Run(kind.name, func(t *testing.T) {
			at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			n := startUnheard(t, kind.open, fixedClock(at), fixedClock(at.Add(time.Minute)))
			chatRoles(t, n.a)
			n.tellB(t)
			// The latest account is b's, created a minute ahead of a's clock.
			_, err := n.b.CreateAccount(ctx, pigeon.Account{ID: dave, Roles: []string{"member"}})
			require.NoError(t, err)
			n.tellA(t)
			old, err := n.a.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
			require.NoError(t, err)
			n.tellB(t)
			g, err := n.a.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
			require.NoError(t, err)
			require.NoError(t, n.b.DeleteAccount(ctx, carol))

			c := n.startOn(t, fixedClock(at))
			again, err := c.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
			require.NoError(t, err)
			if p, err := c.Authenticate(ctx, g.Token); err == nil {
				require.Failf(t, "the grant of the deleted account authenticated as the account created again", "roles %v", p.Roles)
			}
			_, err = c.Authenticate(ctx, g.Token)
			requireCode(t, err, pigeon.CodeUnauthenticated)
			require.True(t, again.CreatedAt.After(old.CreatedAt), "the account created again is stamped %v, its predecessor %v", again.CreatedAt, old.CreatedAt)
		})
	}
}

// grantListings counts the listings of the grants bucket a store is
// asked for.
type grantListings struct {
	*memory.Store
	n atomic.Int64
}

func (s *grantListings) List(ctx context.Context, bucket string) (map[string][]byte, error) {
	if bucket == "grants" {
		s.n.Add(1)
	}
	return s.Store.List(ctx, bucket)
}

// TestDirectoryAloneDoesNotSweepTheStoresGrants: the sweep of the store's
// grants after an account changes finds grants other nodes issued. A node
// without a Cluster holds every grant in its copy, and its change goes
// through them: it does not list the grants bucket for each deleted
// account or role taken (a read of every grant of the directory), and the
// grants still go with the account, or lose the role.
func TestDirectoryAloneDoesNotSweepTheStoresGrants(t *testing.T) {
	st := &grantListings{Store: memory.New(nil)}
	f := accessFixture(t, func(o *pigeon.Options) { o.Store = st })
	_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: dave, Roles: []string{"member", "extra"}})
	require.NoError(t, err)
	kept, err := f.e.IssueGrant(ctx, dave, []string{"member", "extra"}, time.Hour)
	require.NoError(t, err)
	before := st.n.Load()

	_, err = f.e.RemoveAccountRole(ctx, dave, "extra")
	require.NoError(t, err)
	roles, ok := grantRolesInStore(t, st.Store, kept.JTI)
	require.True(t, ok)
	require.Equal(t, []string{"member"}, roles, "the role taken left the grant")

	require.NoError(t, f.e.DeleteAccount(ctx, dave))
	_, ok = grantRolesInStore(t, st.Store, kept.JTI)
	require.False(t, ok, "the grant went with its account")
	require.Equal(t, before, st.n.Load(), "the grants bucket was listed")
}
