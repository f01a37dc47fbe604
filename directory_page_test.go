package pigeon_test

import (
	"fmt"
	"slices"
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
