package pigeon_test

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
)

// quotaSnapshot is every record of the directory's buckets in st, and of
// the broker's (the latest account creation time it keeps among them).
func quotaSnapshot(t *testing.T, st *memory.Store) map[string]map[string]string {
	t.Helper()
	out := directorySnapshot(t, st)
	kv, err := st.List(ctx, "broker")
	require.NoError(t, err)
	out["broker"] = map[string]string{}
	for k, v := range kv {
		out["broker"][k] = string(v)
	}
	return out
}

// auditLen is how many records e's audit log holds.
func auditLen(t *testing.T, e *pigeon.Engine) int {
	t.Helper()
	recs, err := e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	return len(recs)
}

// liveGrantsIn is how many grant records of account st holds that are
// not revoked.
func liveGrantsIn(t *testing.T, st *memory.Store, account string) int {
	t.Helper()
	grants, err := st.List(ctx, "grants")
	require.NoError(t, err)
	revoked, err := st.List(ctx, "grants.revoked")
	require.NoError(t, err)
	n := 0
	for jti, v := range grants {
		var g struct {
			Account string `json:"account"`
		}
		require.NoError(t, json.Unmarshal(v, &g))
		if _, gone := revoked[jti]; !gone && g.Account == account {
			n++
		}
	}
	return n
}

// quotaCase is one quota of the directory: its Options field (set),
// how to create the i-th entry it counts (returning what names it), how
// to change an entry it holds (which the quota does not refuse), how to
// free a place, how to tell that an entry is in force, and how many
// entries the directory holds.
type quotaCase struct {
	name    string
	set     func(o *pigeon.Options, n int)
	setup   func(t *testing.T, e *pigeon.Engine)
	create  func(e *pigeon.Engine, i int) (string, error)
	change  func(e *pigeon.Engine, ref string) error
	free    func(e *pigeon.Engine, ref string) error
	flag    string // the pigeon serve flag that sets the quota
	inForce func(e *pigeon.Engine, ref string) error
	held    func(t *testing.T, e *pigeon.Engine, st *memory.Store) int
}

// quotaCases are the directory's quotas. A grant is named by its token,
// and revoked by the jti it was issued with.
func quotaCases() []quotaCase {
	jtiOf := map[string]string{}
	return []quotaCase{
		{
			name:  "accounts (Options.MaxAccounts)",
			flag:  "--max-accounts",
			set:   func(o *pigeon.Options, n int) { o.MaxAccounts = n },
			setup: func(*testing.T, *pigeon.Engine) {},
			create: func(e *pigeon.Engine, i int) (string, error) {
				id := "spiffe://quota/a" + strconv.Itoa(i)
				_, err := e.CreateAccount(ctx, pigeon.Account{ID: id, Keys: signingKeysOf(i + 1)[i:]})
				return id, err
			},
			change: func(e *pigeon.Engine, id string) error {
				_, err := e.AddAccountRole(ctx, id, "member")
				return err
			},
			free: func(e *pigeon.Engine, id string) error { return e.DeleteAccount(ctx, id) },
			inForce: func(e *pigeon.Engine, id string) error {
				_, err := e.GetAccount(ctx, id)
				return err
			},
			held: func(_ *testing.T, e *pigeon.Engine, _ *memory.Store) int { return len(e.ListAccounts(ctx)) },
		},
		{
			name:  "roles (Options.MaxRoles)",
			flag:  "--max-roles",
			set:   func(o *pigeon.Options, n int) { o.MaxRoles = n },
			setup: func(*testing.T, *pigeon.Engine) {},
			create: func(e *pigeon.Engine, i int) (string, error) {
				name := "role-" + strconv.Itoa(i)
				_, err := e.PutRole(ctx, pigeon.Role{Name: name, Permissions: permissionsOf(1)})
				return name, err
			},
			change: func(e *pigeon.Engine, name string) error {
				_, err := e.PutRole(ctx, pigeon.Role{Name: name, Permissions: permissionsOf(2)})
				return err
			},
			free: func(e *pigeon.Engine, name string) error { return e.DeleteRole(ctx, name) },
			inForce: func(e *pigeon.Engine, name string) error {
				_, err := e.GetRole(ctx, name)
				return err
			},
			held: func(_ *testing.T, e *pigeon.Engine, _ *memory.Store) int { return len(e.ListRoles(ctx)) },
		},
		{
			name: "live grants of an account (Options.MaxGrantsPerAccount)",
			flag: "--max-grants-per-account",
			set:  func(o *pigeon.Options, n int) { o.MaxGrantsPerAccount = n },
			setup: func(t *testing.T, e *pigeon.Engine) {
				for _, id := range []string{carol, dave} {
					_, err := e.CreateAccount(ctx, pigeon.Account{ID: id, Roles: []string{"member"}})
					require.NoError(t, err)
				}
			},
			create: func(e *pigeon.Engine, _ int) (string, error) {
				g, err := e.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
				jtiOf[g.Token] = g.JTI
				return g.Token, err
			},
			// Another account's grants are counted apart.
			change: func(e *pigeon.Engine, _ string) error {
				_, err := e.IssueGrant(ctx, dave, []string{"member"}, time.Hour)
				return err
			},
			free: func(e *pigeon.Engine, token string) error { return e.RevokeGrant(ctx, jtiOf[token]) },
			// The grant's token is good.
			inForce: func(e *pigeon.Engine, token string) error {
				_, err := e.Authenticate(ctx, token)
				return err
			},
			held: func(t *testing.T, _ *pigeon.Engine, st *memory.Store) int { return liveGrantsIn(t, st, carol) },
		},
	}
}

// TestDirectoryQuotas: the directory holds at most Options.MaxAccounts
// accounts, MaxRoles roles and MaxGrantsPerAccount live grants of one
// account. One creation more is refused INVALID_ARGUMENT naming the
// quota, and nothing is written (the directory's records and the latest
// account creation time the store keeps are what they were) or audited;
// a change of an entry held goes on; a place freed (an account or role
// deleted, a grant revoked) takes one more, and the quota refuses the
// next again. Before, an admin (or a stolen admin token) created
// accounts, roles and grants without end, each kept in memory on every
// node and in the store.
func TestDirectoryQuotas(t *testing.T) {
	const quota = 3
	for _, tc := range quotaCases() {
		t.Run(tc.name, func(t *testing.T) {
			st := storeOf(t)
			f := newFixture(t, func(o *pigeon.Options) {
				o.Store = st
				tc.set(o, quota)
			})
			tc.setup(t, f.e)
			var refs []string
			for i := range quota {
				ref, err := tc.create(f.e, i)
				require.NoError(t, err, "within the quota")
				refs = append(refs, ref)
			}
			held := tc.held(t, f.e, st)
			require.Equal(t, quota, held)
			stored := quotaSnapshot(t, st)
			audited := auditLen(t, f.e)

			_, err := tc.create(f.e, quota)
			pe := requireCode(t, err, pigeon.CodeInvalidArgument)
			require.Contains(t, pe.Message, "at most "+strconv.Itoa(quota), "the refusal names the quota")
			require.Contains(t, pe.Message, "pigeon serve "+tc.flag, "the refusal names the flag a server operator sets")
			require.Equal(t, held, tc.held(t, f.e, st), "the directory holds what it held")
			require.Equal(t, stored, quotaSnapshot(t, st), "nothing is written")
			require.Equal(t, audited, auditLen(t, f.e), "nothing is audited")

			require.NoError(t, tc.change(f.e, refs[0]), "a change of what the directory holds goes on")
			require.NoError(t, tc.free(f.e, refs[0]))
			_, err = tc.create(f.e, quota)
			require.NoError(t, err, "a place freed takes one more")
			_, err = tc.create(f.e, quota+1)
			requireCode(t, err, pigeon.CodeInvalidArgument)
			require.Equal(t, quota, tc.held(t, f.e, st))
		})
	}
}

// TestDirectoryOverQuotaStoreLoadsWhole: a store that holds more
// accounts, roles or live grants of an account than the quotas of the
// engine that reads it (written before them, or under larger ones) loads
// whole: every entry is there, and every grant's token is still good.
// Only a creation is refused, while the directory holds as many as its
// quota or more; a change of an entry held goes on.
func TestDirectoryOverQuotaStoreLoadsWhole(t *testing.T) {
	const before, quota = 5, 3
	for _, tc := range quotaCases() {
		t.Run(tc.name, func(t *testing.T) {
			st := storeOf(t)
			f := newFixture(t, func(o *pigeon.Options) { o.Store = st })
			tc.setup(t, f.e)
			var refs []string
			for i := range before {
				ref, err := tc.create(f.e, i)
				require.NoError(t, err)
				refs = append(refs, ref)
			}
			stored := quotaSnapshot(t, st)

			// Read again from the store by an engine of smaller quotas
			// that takes over from f's.
			again := newFixture(t, func(o *pigeon.Options) {
				o.Store = st
				tc.set(o, quota)
			})
			require.Equal(t, tc.held(t, f.e, st), tc.held(t, again.e, st), "every entry loads")
			require.Equal(t, stored, quotaSnapshot(t, st), "loading writes nothing")
			for _, ref := range refs {
				require.NoError(t, tc.inForce(again.e, ref), "in force past the quota")
			}

			_, err := tc.create(again.e, before)
			pe := requireCode(t, err, pigeon.CodeInvalidArgument)
			require.Contains(t, pe.Message, "at most "+strconv.Itoa(quota))
			require.Equal(t, stored, quotaSnapshot(t, st), "nothing is written")
			require.NoError(t, tc.change(again.e, refs[0]), "a change of what the directory holds goes on")
		})
	}
}

// TestClusterDirectoryQuotasCountEveryNode: a node counts, against its
// quotas, what another node created once it has heard of it: accounts,
// roles and grants created on node a fill b's quota too.
func TestClusterDirectoryQuotasCountEveryNode(t *testing.T) {
	const quota = 2
	for _, tc := range quotaCases() {
		t.Run(tc.name, func(t *testing.T) {
			c := startNodePair(t, func() *pigeon.Options {
				o := accessFixtureOptions()
				tc.set(o, quota)
				return o
			}, func(h *hub, view nodeStore) (store.Store, pigeon.Cluster) { return view, h.node() })
			tc.setup(t, c.a)
			var refs []string
			for i := range quota {
				ref, err := tc.create(c.a, i)
				require.NoError(t, err)
				refs = append(refs, ref)
			}
			c.announce()
			require.Eventually(t, func() bool { return tc.inForce(c.b, refs[quota-1]) == nil }, 10*time.Second, 5*time.Millisecond)
			_, err := tc.create(c.b, quota)
			requireCode(t, err, pigeon.CodeInvalidArgument)
		})
	}
}

// TestGrantQuotaCountsLiveGrants: an account's grant quota counts the
// grants its tokens are good for: an expired grant frees its place as a
// revoked one does, before the retention pass forgets it.
func TestGrantQuotaCountsLiveGrants(t *testing.T) {
	f := newFixture(t, func(o *pigeon.Options) { o.MaxGrantsPerAccount = 2 })
	_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
	require.NoError(t, err)
	_, err = f.e.IssueGrant(ctx, carol, []string{"member"}, time.Second)
	require.NoError(t, err)
	_, err = f.e.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
	require.NoError(t, err)
	_, err = f.e.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
	requireCode(t, err, pigeon.CodeInvalidArgument)

	f.clock.Advance(time.Second)
	_, err = f.e.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
	require.NoError(t, err, "the expired grant's place is free")
	_, err = f.e.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
	requireCode(t, err, pigeon.CodeInvalidArgument)
}

// TestDirectoryQuotaDefaults: the quotas' defaults, and a negative
// quota, which is none.
func TestDirectoryQuotaDefaults(t *testing.T) {
	require.Equal(t, 1_000_000, pigeon.DefaultMaxAccounts)
	require.Equal(t, 100_000, pigeon.DefaultMaxRoles)
	require.Equal(t, 1000, pigeon.DefaultMaxGrantsPerAccount)

	f := newFixture(t, func(o *pigeon.Options) { o.MaxGrantsPerAccount = -1 })
	_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
	require.NoError(t, err)
	for range pigeon.DefaultMaxGrantsPerAccount + 1 {
		_, err := f.e.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
		require.NoError(t, err)
	}
}
