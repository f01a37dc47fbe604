package pigeon_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestDirectoryPages: ListAccountsPage and ListRolesPage answer at most max
// entries by id or name after the one after names, and next, the page's
// last, while another follows. Walked a few at a time while entries are
// created and deleted between pages, every entry that stays is listed
// exactly once, in order; one created ahead of the walk is listed, one
// deleted ahead of it is not. max <= 0 lists every one, as ListAccounts
// and ListRoles do; an after that is no valid id is INVALID_ARGUMENT.
func TestDirectoryPages(t *testing.T) {
	e := newFixture(t).e
	type lister struct {
		name   string
		create func(id string)
		remove func(id string)
		page   func(after string, max int) ([]string, string, error)
		all    func() []string
	}
	id := func(prefix string, i int) string { return fmt.Sprintf("%s%02d", prefix, i) }
	listers := []lister{
		{
			name: "accounts",
			create: func(id string) {
				_, err := e.CreateAccount(ctx, pigeon.Account{ID: id})
				require.NoError(t, err)
			},
			remove: func(id string) { require.NoError(t, e.DeleteAccount(ctx, id)) },
			page: func(after string, max int) ([]string, string, error) {
				as, next, err := e.ListAccountsPage(ctx, after, max)
				var ids []string
				for _, a := range as {
					ids = append(ids, a.ID)
				}
				return ids, next, err
			},
			all: func() (ids []string) {
				for _, a := range e.ListAccounts(ctx) {
					ids = append(ids, a.ID)
				}
				return ids
			},
		},
		{
			name: "roles",
			create: func(id string) {
				_, err := e.PutRole(ctx, pigeon.Role{Name: id})
				require.NoError(t, err)
			},
			remove: func(id string) { require.NoError(t, e.DeleteRole(ctx, id)) },
			page: func(after string, max int) ([]string, string, error) {
				rs, next, err := e.ListRolesPage(ctx, after, max)
				var names []string
				for _, r := range rs {
					names = append(names, r.Name)
				}
				return names, next, err
			},
			all: func() (names []string) {
				for _, r := range e.ListRoles(ctx) {
					names = append(names, r.Name)
				}
				return names
			},
		},
	}
	for _, l := range listers {
		t.Run(l.name, func(t *testing.T) {
			prefix := "spiffe://test/" + l.name + "/"
			for i := range 20 {
				l.create(id(prefix, (i*7)%20)) // out of order
			}
			got, err := func() ([]string, error) {
				var got []string
				after := ""
				for page := 0; ; page++ {
					require.Less(t, page, 50, "the pages end")
					names, next, err := l.page(after, 3)
					if err != nil {
						return nil, err
					}
					require.LessOrEqual(t, len(names), 3)
					got = append(got, names...)
					if next == "" {
						return got, nil
					}
					require.Equal(t, names[len(names)-1], next)
					after = next
					if page == 1 {
						l.remove(id(prefix, 1))        // listed already
						l.remove(id(prefix, 15))       // ahead of the walk
						l.create(id(prefix, 16) + "a") // ahead of the walk
						l.create(id(prefix, 2) + "a")  // behind it
					}
				}
			}()
			require.NoError(t, err)
			var want []string
			for i := range 20 {
				if i != 15 {
					want = append(want, id(prefix, i))
				}
				if i == 16 {
					want = append(want, id(prefix, 16)+"a")
				}
			}
			require.Equal(t, want, filterPrefix(got, prefix))

			every, next, err := l.page("", 0)
			require.NoError(t, err)
			require.Empty(t, next)
			require.Equal(t, l.all(), every, "max 0: every one")

			for _, after := range []string{"a b", "x/../y", "tab\there", string(make([]byte, pigeon.MaxIDLength+1))} {
				_, _, err := l.page(after, 3)
				requireCode(t, err, pigeon.CodeInvalidArgument)
			}
		})
	}
}

// filterPrefix returns the names of list that start with prefix, in order.
func filterPrefix(list []string, prefix string) []string {
	return slices.DeleteFunc(slices.Clone(list), func(s string) bool { return len(s) < len(prefix) || s[:len(prefix)] != prefix })
}

// TestDirectoryPageByteBudget: a page of ListAccountsPage and ListRolesPage
// asked for max 10,000 (the server's cap) ends where its entries reach
// pigeon.MaxPageBytes of JSON (json.Marshal's, a comma between two), not
// at max: a directory of the largest accounts the write path takes
// (MaxAccountAttributes attributes of the longest name and value, the
// values plain or written as six-byte escapes), and of large roles,
// answers pages of a few entries, each within the budget yet full (the
// entry that follows would take it past), with next set to its last
// entry: the page the server sends, copied, and no entry more. Before, a
// page copied up to max entries, all but a budget's worth of which the
// server threw away. Walking the pages by next lists every entry once, in
// order.
func TestDirectoryPageByteBudget(t *testing.T) {
	e := newFixture(t).e
	type lister struct {
		name   string
		create func(id string, i int)
		page   func(after string) (entries []any, names []string, next string)
		get    func(id string) any
		all    func() []string
	}
	value := func(i, n int) string { // plain for an even i, escaped for an odd one
		return strings.Repeat([]string{"v", "<"}[i%2], n)
	}
	listers := []lister{
		{
			name: "accounts",
			create: func(id string, i int) {
				attrs := make(map[string]string, pigeon.MaxAccountAttributes)
				for j := range pigeon.MaxAccountAttributes {
					name := fmt.Sprintf("attr-%02d-", j)
					attrs[name+strings.Repeat("n", pigeon.MaxAttributeNameLength-len(name))] = value(i, pigeon.MaxAttributeValueLength)
				}
				_, err := e.CreateAccount(ctx, pigeon.Account{ID: id, Attributes: attrs})
				require.NoError(t, err)
			},
			page: func(after string) (entries []any, ids []string, next string) {
				as, next, err := e.ListAccountsPage(ctx, after, 10000)
				require.NoError(t, err)
				for _, a := range as {
					entries, ids = append(entries, a), append(ids, a.ID)
				}
				return entries, ids, next
			},
			get: func(id string) any {
				a, err := e.GetAccount(ctx, id)
				require.NoError(t, err)
				return a
			},
			all: func() (ids []string) {
				for _, a := range e.ListAccounts(ctx) {
					ids = append(ids, a.ID)
				}
				return ids
			},
		},
		{
			name: "roles",
			create: func(id string, i int) {
				// Subjects of the longest a permission takes
				// (MaxEnvelopeField bytes).
				perms := make([]pigeon.Permission, 256)
				for j := range perms {
					name := fmt.Sprintf("big.%03d.", j)
					perms[j] = pigeon.Permission{Subject: name + value(i, pigeon.MaxEnvelopeField-len(name)), Operations: []pigeon.Operation{pigeon.OpReceive}}
				}
				_, err := e.PutRole(ctx, pigeon.Role{Name: id, Permissions: perms})
				require.NoError(t, err)
			},
			page: func(after string) (entries []any, names []string, next string) {
				rs, next, err := e.ListRolesPage(ctx, after, 10000)
				require.NoError(t, err)
				for _, r := range rs {
					entries, names = append(entries, r), append(names, r.Name)
				}
				return entries, names, next
			},
			get: func(name string) any {
				r, err := e.GetRole(ctx, name)
				require.NoError(t, err)
				return r
			},
			all: func() (names []string) {
				for _, r := range e.ListRoles(ctx) {
					names = append(names, r.Name)
				}
				return names
			},
		},
	}
	jsonLen := func(v any) int {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return len(b)
	}
	for _, l := range listers {
		t.Run(l.name, func(t *testing.T) {
			prefix := "spiffe://test/" + l.name + "/big-"
			var want []string
			for i := range 40 {
				want = append(want, fmt.Sprintf("%s%02d", prefix, i))
				l.create(want[i], i)
			}
			all := l.all()
			var got []string
			after := ""
			pages := 1
			for ; ; pages++ {
				require.LessOrEqual(t, pages, len(all), "the pages end")
				entries, names, next := l.page(after)
				require.NotEmpty(t, names)
				got = append(got, names...)
				size := len(entries) - 1 // the commas
				for _, entry := range entries {
					size += jsonLen(entry)
				}
				require.LessOrEqual(t, size, pigeon.MaxPageBytes, "page %d: its entries within the budget", pages)
				if next == "" {
					break
				}
				require.Equal(t, names[len(names)-1], next, "page %d: next is its last entry", pages)
				following := l.get(all[slices.Index(all, next)+1])
				require.Greater(t, size+1+jsonLen(following), pigeon.MaxPageBytes, "page %d: it ends only where the next entry would take it past the budget", pages)
				after = next
			}
			require.Equal(t, all, got, "every entry once, in order")
			require.Equal(t, want, filterPrefix(got, prefix))
			require.Greater(t, pages, 2, "the entries take several pages")
		})
	}
}
