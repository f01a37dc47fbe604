package pigeon

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store/memory"
)

// grantIndexModel is what a directory should hold after a sequence of
// changes: the accounts and their roles, and each grant's account, roles
// and expiry (a revoked grant is held until it is pruned or its account
// deleted).
type grantIndexModel struct {
	accounts map[string][]string
	grants   map[string]grantIndexEntry
}

type grantIndexEntry struct {
	account string
	roles   []string
	expires time.Time
}

// TestGrantIndexAgreesWithScan: a random sequence of changes (accounts
// created and deleted, roles given and taken, grants issued, revoked and
// pruned, the directory read again from its store after another node
// changed it) over a few accounts. After each step, the grants the index
// (grantsOfAccount) finds for every account are those a scan of every
// grant finds, and the directory holds the grants the sequence leaves: an
// account deletion or a role removal, which go through the index, reach
// every grant of the account and no other.
func TestGrantIndexAgreesWithScan(t *testing.T) {
	ids := []string{
		"spiffe://merchant-prod/ns/shop/sa/a0", "spiffe://merchant-prod/ns/shop/sa/a1",
		"spiffe://merchant-prod/ns/shop/sa/a2", "spiffe://merchant-prod/ns/shop/sa/a3",
	}
	roles := []string{"auditor", "reader", "writer"}
	const steps = 300
	for seed := uint64(1); seed <= 10; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
			st := memory.New(nil)
			e, err := New(ctx, &Options{Store: st})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
			m := grantIndexModel{accounts: map[string][]string{}, grants: map[string]grantIndexEntry{}}
			start := time.Now()
			someRoles := func() []string {
				var out []string
				for _, r := range roles {
					if rng.IntN(2) == 0 {
						out = append(out, r)
					}
				}
				return out
			}
			// How many deletions and role removals reached grants: the
			// sequence is not worth its name without them.
			var deletions, removals int
			for step := range steps {
				// Mostly an account the directory holds; now and then
				// any, which may be absent.
				id := ids[rng.IntN(len(ids))]
				if held := slices.Sorted(maps.Keys(m.accounts)); len(held) > 0 && rng.IntN(5) > 0 {
					id = held[rng.IntN(len(held))]
				}
				role := roles[rng.IntN(len(roles))]
				_, exists := m.accounts[id]
				var what string
				switch op := rng.IntN(12); {
				case op <= 1: // create
					what = "create " + id
					asked := someRoles()
					_, err := e.CreateAccount(ctx, Account{ID: id, Roles: asked})
					if exists {
						require.Equal(t, CodeConflict, ErrorCode(err), what)
						break
					}
					require.NoError(t, err, what)
					m.accounts[id] = uniqueSorted(asked)
				case op <= 5: // issue
					asked := someRoles()
					if len(asked) == 0 {
						asked = []string{role}
					}
					what = fmt.Sprintf("issue to %s %v", id, asked)
					ttl := time.Duration(1+rng.IntN(3)) * time.Hour
					tok, err := e.IssueGrant(ctx, id, asked, ttl)
					if !exists {
						require.Equal(t, CodeNotFound, ErrorCode(err), what)
						break
					}
					require.NoError(t, err, what)
					m.grants[tok.JTI] = grantIndexEntry{account: id, roles: intersect(uniqueSorted(asked), m.accounts[id]), expires: tok.ExpiresAt}
				case op == 6: // revoke
					jtis := slices.Sorted(maps.Keys(m.grants))
					if len(jtis) == 0 {
						what = "revoke: none"
						break
					}
					jti := jtis[rng.IntN(len(jtis))]
					what = "revoke " + jti
					require.NoError(t, e.RevokeGrant(ctx, jti), what) // held until pruned or its account deleted
				case op == 7: // delete the account
					what = "delete " + id
					err := e.DeleteAccount(ctx, id)
					if !exists {
						require.Equal(t, CodeNotFound, ErrorCode(err), what)
						break
					}
					require.NoError(t, err, what)
					delete(m.accounts, id)
					if slices.ContainsFunc(slices.Collect(maps.Values(m.grants)), func(g grantIndexEntry) bool { return g.account == id }) {
						deletions++
					}
					maps.DeleteFunc(m.grants, func(_ string, g grantIndexEntry) bool { return g.account == id })
				case op == 8: // take a role
					what = "remove " + role + " from " + id
					_, err := e.RemoveAccountRole(ctx, id, role)
					if !exists {
						require.Equal(t, CodeNotFound, ErrorCode(err), what)
						break
					}
					require.NoError(t, err, what)
					m.accounts[id] = withoutRole(m.accounts[id], role)
					for jti, g := range m.grants {
						if g.account == id && slices.Contains(g.roles, role) {
							removals++
							g.roles = withoutRole(g.roles, role)
							m.grants[jti] = g
						}
					}
				case op == 9: // give a role
					what = "add " + role + " to " + id
					_, err := e.AddAccountRole(ctx, id, role)
					if !exists {
						require.Equal(t, CodeNotFound, ErrorCode(err), what)
						break
					}
					require.NoError(t, err, what)
					m.accounts[id] = uniqueSorted(append(slices.Clone(m.accounts[id]), role))
				case op == 10: // another node's change of the store, then read again
					what = "refresh"
					switch jtis := slices.Sorted(maps.Keys(m.grants)); {
					case rng.IntN(3) == 0 && len(jtis) > 0:
						jti := jtis[rng.IntN(len(jtis))]
						what = "refresh after another node forgot " + jti
						require.NoError(t, st.Delete(ctx, bucketGrants, jti), what)
						delete(m.grants, jti)
					case rng.IntN(2) == 0 && exists:
						g := storedGrantOf(t, &e.dir, id, role, rng)
						what = "refresh after another node issued " + g.JTI + " to " + id
						b, err := json.Marshal(g)
						require.NoError(t, err, what)
						require.NoError(t, st.Put(ctx, bucketGrants, g.JTI, b), what)
						m.grants[g.JTI] = grantIndexEntry{account: id, roles: g.Roles, expires: g.ExpiresAt}
					}
					require.NoError(t, e.dir.refresh(ctx), what)
				default: // prune the grants expired before a cutoff
					cutoff := start.Add(time.Duration(30+rng.IntN(150)) * time.Minute)
					what = fmt.Sprint("prune before ", cutoff.Sub(start))
					_, err := e.dir.pruneGrants(ctx, cutoff, 1<<20)
					require.NoError(t, err, what)
					maps.DeleteFunc(m.grants, func(_ string, g grantIndexEntry) bool { return g.expires.Before(cutoff) })
				}
				requireGrantIndexAgrees(t, &e.dir, ids, m, fmt.Sprintf("step %d: %s", step, what))
			}
			require.Positive(t, deletions, "an account deleted with grants")
			require.Positive(t, removals, "a role taken from grants")
		})
	}
}

// requireGrantIndexAgrees checks that the grants d's index finds for
// every account (those of ids, and every account a grant or the index
// names) are those a scan of d.grants finds; that the index keeps no
// account without grants; and that d holds m's grants, each under its
// account with its roles.
func requireGrantIndexAgrees(t *testing.T, d *directory, ids []string, m grantIndexModel, at string) {
	t.Helper()
	d.mu.RLock()
	defer d.mu.RUnlock()
	scan := map[string][]string{}
	accounts := map[string]bool{}
	for _, id := range ids {
		accounts[id] = true
	}
	for jti, g := range d.grants {
		scan[g.Account] = append(scan[g.Account], jti)
		accounts[g.Account] = true
	}
	for id, jtis := range d.grantsOf {
		require.NotEmpty(t, jtis, "%s: the index keeps account %s without grants", at, id)
		accounts[id] = true
	}
	for id := range accounts {
		want := scan[id]
		slices.Sort(want)
		got := d.grantsOfAccount(id)
		if len(got) == 0 {
			got = nil
		}
		require.Equal(t, want, got, "%s: the grants of %s through the index and by a scan", at, id)
	}
	require.Len(t, d.grants, len(m.grants), "%s: the grants the directory holds", at)
	for jti, want := range m.grants {
		g := d.grants[jti]
		require.NotNil(t, g, "%s: grant %s of %s", at, jti, want.account)
		require.Equal(t, want.account, g.Account, "%s: grant %s", at, jti)
		require.ElementsMatch(t, want.roles, g.Roles, "%s: the roles of grant %s", at, jti)
	}
}

// storedGrantOf is a grant of account id (held by d) as another node
// would store it: of role when the account holds it, for an hour.
func storedGrantOf(t *testing.T, d *directory, id, role string, rng *rand.Rand) *grantRecord {
	t.Helper()
	d.mu.RLock()
	a := d.accounts[id]
	d.mu.RUnlock()
	require.NotNil(t, a, id)
	now := time.Now().UTC().Truncate(time.Second)
	roles := intersect([]string{role}, a.Roles)
	if roles == nil {
		roles = []string{}
	}
	return &grantRecord{JTI: fmt.Sprintf("gr_%016x%016x", rng.Uint64(), rng.Uint64()), Account: id, Roles: roles,
		IssuedAt: now, ExpiresAt: now.Add(time.Hour), AccountCreatedAt: a.CreatedAt}
}

// withoutRole is s without r, as a new slice.
func withoutRole(s []string, r string) []string {
	return slices.DeleteFunc(slices.Clone(s), func(x string) bool { return x == r })
}
