package pigeon

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/internal/sortedkeys"
	"pigeon/store/memory"
)

// referencePage is the page pageOf must answer, found the plain way: every
// key of m sorted, those after after, at most max of them (max <= 0: every
// one), ending before the entry whose JSON (json.Marshal, a comma before
// every entry but the first) would take the page past MaxPageBytes, the
// first entry always on it; and whether another follows.
func referencePage[T any](t *testing.T, m map[string]*T, after string, max int) (keys []string, more bool) {
	t.Helper()
	used := 0
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k <= after {
			continue
		}
		if max <= 0 {
			keys = append(keys, k)
			continue
		}
		if len(keys) == max {
			return keys, true
		}
		b, err := json.Marshal(m[k])
		require.NoError(t, err)
		n := len(b)
		if len(keys) > 0 {
			n++
			if used+n > MaxPageBytes {
				return keys, true
			}
		}
		used += n
		keys = append(keys, k)
	}
	return keys, false
}

// requirePage checks page and more, a page of m after after of at most
// max, against referencePage: the same keys in the same order, each entry
// as m holds it, and the same more.
func requirePage[T any](t *testing.T, m map[string]*T, after string, max int, page []T, more bool, key func(*T) string) {
	t.Helper()
	want, wantMore := referencePage(t, m, after, max)
	got := make([]string, len(page))
	for i := range page {
		got[i] = key(&page[i])
		require.Equal(t, *m[got[i]], page[i], "the entry as the directory holds it")
	}
	if want == nil {
		want = []string{}
	}
	require.Equal(t, want, got, "after %q max %d", after, max)
	require.Equal(t, wantMore, more, "after %q max %d", after, max)
}

// TestDirectoryPagesMatchReference: pages of accounts and roles, found by
// the keys kept in order (sortedkeys) rather than by a scan of the map,
// are exactly the plain reference's (referencePage: sort every key, keep
// those after the cursor, take max), over random directories, random
// cursors (a key held, one removed, one never held, "", one after every
// key, the last page's last) and random page sizes, with random changes
// between pages: accounts and roles created, changed, deleted, more
// changes at once than the index keeps (sortedkeys.MaxChanged), and the
// maps replaced whole, as a refresh or a reload puts in place what it
// read of another node's changes. TestDirectoryPageBytesMatchReference
// takes the byte budget.
func TestDirectoryPagesMatchReference(t *testing.T) {
	ctx := context.Background()
	noop := func() {}
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 3))
			st := memory.New(nil)
			t.Cleanup(func() { _ = st.Close(ctx) })
			var d directory
			require.NoError(t, d.load(ctx, st, quiet))

			accountID := func() string { return fmt.Sprintf("spiffe://test/u/%03d", rng.IntN(300)) }
			roleName := func() string { return fmt.Sprintf("role-%02d", rng.IntN(60)) }
			attrs := func() map[string]string {
				return map[string]string{"team": strings.Repeat("t", rng.IntN(40))}
			}
			create := func(id string, attrs map[string]string) {
				if _, ok := d.accounts[id]; ok {
					return
				}
				require.NoError(t, d.createAccount(ctx, &Account{ID: id, Attributes: attrs, CreatedAt: time.Now()}, noop))
			}
			for range 100 {
				create(accountID(), attrs())
			}
			for range 20 {
				require.NoError(t, d.putRole(ctx, &Role{Name: roleName(), Permissions: []Permission{}}, noop))
			}

			change := func() {
				id := accountID()
				_, held := d.accounts[id]
				switch r := rng.IntN(100); {
				case r < 25:
					create(id, attrs())
				case r < 35 && held:
					require.NoError(t, d.deleteAccount(ctx, id, noop))
				case r < 45 && held:
					_, err := d.updateAccount(ctx, id, func(a *Account) error { a.Attributes = attrs(); return nil }, nil)
					require.NoError(t, err)
				case r < 55:
					require.NoError(t, d.putRole(ctx, &Role{Name: roleName(), Permissions: []Permission{
						{Subject: "s", Operations: []Operation{OpPublish}}}}, noop))
				case r < 62:
					if name := roleName(); d.roles[name] != nil {
						require.NoError(t, d.deleteRole(ctx, name, noop))
					}
				}
			}
			// Another node's changes, read in whole: the maps replaced, as
			// refresh and reload put what they read in place (takeRead).
			replace := func(step int) {
				fresh := directory{accounts: maps.Clone(d.accounts), roles: maps.Clone(d.roles),
					grants: d.grants, revoked: d.revoked, keyOwner: d.keyOwner}
				id := fmt.Sprintf("spiffe://test/v/%d", step)
				a := &Account{ID: id, CreatedAt: time.Now().UTC()}
				b, err := json.Marshal(a)
				require.NoError(t, err)
				require.NoError(t, st.Put(ctx, bucketAccounts, id, b))
				fresh.accounts[id] = a
				if gone := accountID(); fresh.accounts[gone] != nil {
					delete(fresh.accounts, gone)
					require.NoError(t, st.Delete(ctx, bucketAccounts, gone))
				}
				if gone := roleName(); fresh.roles[gone] != nil {
					delete(fresh.roles, gone)
					require.NoError(t, st.Delete(ctx, bucketRoles, gone))
				}
				d.changing.Lock()
				defer d.changing.Unlock()
				d.takeRead(&fresh)
			}
			cursor := func(keys []string, last string) string {
				switch r := rng.IntN(6); {
				case r == 0:
					return ""
				case r == 1:
					return "~" // after every key
				case r == 2:
					return last
				case r == 3 && len(keys) > 0:
					return keys[rng.IntN(len(keys))] // held, or removed since
				default:
					return accountID() + "x" // held by none
				}
			}

			var lastAccount, lastRole string
			accountKeys := slices.Sorted(maps.Keys(d.accounts))
			for step := range 150 {
				for range rng.IntN(4) {
					change()
				}
				switch {
				case step%30 == 15:
					replace(step)
				case step == 70: // more changes than the index keeps
					for i := range sortedkeys.MaxChanged + 1 {
						create(fmt.Sprintf("spiffe://test/w/%04d", i), nil)
					}
				}
				after, max := cursor(accountKeys, lastAccount), rng.IntN(30)-3
				page, more := d.accountPage(after, max)
				requirePage(t, d.accounts, after, max, page, more, func(a *Account) string { return a.ID })
				if len(page) > 0 {
					lastAccount = page[len(page)-1].ID
				}
				accountKeys = slices.Sorted(maps.Keys(d.accounts))

				after = cursor(slices.Sorted(maps.Keys(d.roles)), lastRole)
				rs, more := d.rolePage(after, max)
				requirePage(t, d.roles, after, max, rs, more, func(r *Role) string { return r.Name })
				if len(rs) > 0 {
					lastRole = rs[len(rs)-1].Name
				}
			}
		})
	}
}

// TestDirectoryPageBytesMatchReference: pages across accounts large
// enough that MaxPageBytes ends them (about 400 KB of JSON each, twelve
// side by side among small ones) are the reference's (referencePage: they
// end before the entry that would pass the budget, more set; the first
// entry always on the page), from cursors before, among and after them
// and for page sizes below and above what the budget holds, as they are
// and once some of them have shrunk and others grown under their ids (a
// change of an account's value, which leaves the sorted ids as they are).
func TestDirectoryPageBytesMatchReference(t *testing.T) {
	big := map[string]string{}
	for i := range MaxAccountAttributes {
		big[fmt.Sprintf("a%02d", i)+strings.Repeat("n", MaxAttributeNameLength-3)] = strings.Repeat("<", MaxAttributeValueLength)
	}
	d := directory{accounts: map[string]*Account{}}
	var ids []string
	for i := range 16 {
		id := fmt.Sprintf("spiffe://test/u/%02d", i)
		a := &Account{ID: id, CreatedAt: time.Now()}
		if 2 <= i && i < 14 {
			a.Attributes = big
		}
		d.accounts[id] = a
		ids = append(ids, id)
	}
	afters := []string{"", ids[2], ids[5] + "x", ids[13], "~"}
	for pass := range 2 {
		if pass == 1 { // two of them shrink, and two small ones grow
			d.mu.Lock()
			for i, attrs := range map[int]map[string]string{3: nil, 8: nil, 14: big, 15: big} {
				a := *d.accounts[ids[i]]
				a.Attributes = attrs
				d.accounts[ids[i]] = &a
			}
			d.mu.Unlock()
		}
		for _, after := range afters {
			for _, max := range []int{0, 1, 11, 40} {
				page, more := d.accountPage(after, max)
				requirePage(t, d.accounts, after, max, page, more, func(a *Account) string { return a.ID })
			}
		}
		page, more := d.accountPage("", 40)
		require.True(t, more, "pass %d: the budget ends the page", pass)
		require.Less(t, len(page), 16, "pass %d", pass)
	}
}
