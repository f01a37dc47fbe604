package server_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// namePage is one page of GET /v1/accounts, /v1/roles or /v1/programs:
// the ids (or names) it lists, in its order, and its next.
type namePage struct {
	names []string
	next  string
}

// getNamePage asks path (a listing answering field, each entry named by
// key) for the page query selects, as token, and reads it.
func getNamePage(t *testing.T, base, path, field, key, token string, query url.Values) namePage {
	t.Helper()
	u := base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	r := doRequest(t, http.MethodGet, u, token, "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	body := r.json(t)
	entries, ok := body[field].([]any)
	require.True(t, ok, "%s is a list: %s", field, r.body)
	var p namePage
	for _, e := range entries {
		p.names = append(p.names, e.(map[string]any)[key].(string))
	}
	if next, ok := body["next"]; ok {
		p.next = next.(string)
		require.NotEmpty(t, p.next, "next is left out rather than empty")
	}
	return p
}

// walkNamePages reads every page of path size entries at a time, following
// next, and returns the names listed and the pages read.
func walkNamePages(t *testing.T, base, path, field, key, token string, size int) (names []string, pages int) {
	t.Helper()
	q := url.Values{"max": {strconv.Itoa(size)}}
	for {
		pages++
		require.LessOrEqual(t, pages, 1000, "the pages end")
		p := getNamePage(t, base, path, field, key, token, q)
		require.LessOrEqual(t, len(p.names), size, "a page holds at most max")
		names = append(names, p.names...)
		if p.next == "" {
			return names, pages
		}
		require.Len(t, p.names, size, "a page that names a next one is full")
		require.Equal(t, p.names[len(p.names)-1], p.next, "next is the page's last entry")
		q.Set("after", p.next)
	}
}

// TestNameListingsArePaged: GET /v1/accounts, /v1/roles and /v1/programs
// answer one page by id or name, at most ?max= entries after the one
// ?after= names, and "next" while more follow. Walking the pages with
// small sizes lists every entry exactly once, in order, in as many pages
// as it takes (no empty page at the end); without parameters a listing
// smaller than a page is answered whole, without a next, as before.
func TestNameListingsArePaged(t *testing.T) {
	e, _, hs := programsServer(t)
	ctx := context.Background()
	var accounts, roles, progs []string
	for i := range 7 {
		id := fmt.Sprintf("spiffe://test/ns/a/sa/acct-%d", 6-i) // created out of order
		_, err := e.CreateAccount(ctx, pigeon.Account{ID: id})
		require.NoError(t, err)
		name := fmt.Sprintf("role-%d", (i*3)%7)
		_, err = e.PutRole(ctx, pigeon.Role{Name: name, Permissions: []pigeon.Permission{{Subject: "jobs.in", Operations: []pigeon.Operation{pigeon.OpReceive}}}})
		require.NoError(t, err)
		roles = append(roles, name)
		prog := fmt.Sprintf("prog-%d", (i*5)%7)
		r := doRequest(t, http.MethodPut, hs.URL+"/v1/programs/"+prog, "admin-token", deployBody(t, progA))
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
		progs = append(progs, prog)
	}
	for _, a := range e.ListAccounts(ctx) {
		accounts = append(accounts, a.ID) // svc-a and svc-b as well
	}
	slices.Sort(roles)
	slices.Sort(progs)
	for _, l := range []struct {
		path, field, key string
		want             []string
	}{
		{"/v1/accounts", "accounts", "id", accounts},
		{"/v1/roles", "roles", "name", roles},
		{"/v1/programs", "programs", "name", progs},
	} {
		t.Run(l.field, func(t *testing.T) {
			require.True(t, slices.IsSorted(l.want))
			for _, size := range []int{1, 2, 3, len(l.want) - 1, len(l.want), len(l.want) + 1} {
				names, pages := walkNamePages(t, hs.URL, l.path, l.field, l.key, "admin-token", size)
				require.Equal(t, l.want, names, "max %d: each once, in order", size)
				require.Equal(t, max(1, (len(l.want)+size-1)/size), pages, "max %d: pages read", size)
			}
			p := getNamePage(t, hs.URL, l.path, l.field, l.key, "admin-token", nil)
			require.Equal(t, l.want, p.names, "no parameters: the first page, here all of them")
			require.Empty(t, p.next)
			// A page from a cursor that names no entry starts after
			// where it would sort.
			p = getNamePage(t, hs.URL, l.path, l.field, l.key, "admin-token", url.Values{"after": {l.want[2] + "0"}, "max": {"2"}})
			require.Equal(t, l.want[3:5], p.names)
		})
	}
}

// TestProgramPagesHoldOnlyTheCallersPrograms: to a principal with the
// role programs but not admin, a page of GET /v1/programs holds only the
// programs of its own account, full pages of them, and no next it is
// answered names another account's program (which would tell that it
// exists).
func TestProgramPagesHoldOnlyTheCallersPrograms(t *testing.T) {
	_, _, hs := programsServer(t)
	var mine []string
	for i := range 8 {
		name, token, account := fmt.Sprintf("p%d-a", i), "a-token", progA
		if i%2 == 1 {
			name, token, account = fmt.Sprintf("p%d-b", i), "b-token", progB
		} else {
			mine = append(mine, name)
		}
		r := doRequest(t, http.MethodPut, hs.URL+"/v1/programs/"+name, token, deployBody(t, account))
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	}
	for _, size := range []int{1, 2, 3} {
		names, pages := walkNamePages(t, hs.URL, "/v1/programs", "programs", "name", "a-token", size)
		require.Equal(t, mine, names, "max %d", size)
		require.Equal(t, (len(mine)+size-1)/size, pages, "max %d: full pages of its own", size)
	}
	all, _ := walkNamePages(t, hs.URL, "/v1/programs", "programs", "name", "admin-token", 3)
	require.Len(t, all, 8)
}

// TestNameListingQueryIsChecked: a ?max= that is not a non-negative
// integer, or an ?after= that is not an id of the kind the listing holds
// (which no page's next ever is), is 400 BAD_REQUEST naming the
// parameter, as on the other paged routes; a parameter the listings do
// not take is refused as on every route. A ?max= above the cap is the cap,
// as for the audit log and the quarantine.
func TestNameListingQueryIsChecked(t *testing.T) {
	_, _, hs := programsServer(t)
	long := strings.Repeat("a", pigeon.MaxIDLength+1)
	for _, path := range []string{"/v1/accounts", "/v1/roles", "/v1/programs"} {
		for _, tc := range []struct {
			name, query, says string
		}{
			{"max not a number", "max=ten", "max must be a non-negative integer"},
			{"negative max", "max=-1", "max must be a non-negative integer"},
			{"max past 63 bits", "max=99999999999999999999", "max must be a non-negative integer"},
			{"after with a space", "after=a+b", "query parameter after must be a page's next"},
			{"after with a control character", "after=a%0Ab", "query parameter after must be a page's next"},
			{"after a dot-dot segment", "after=x%2F..", "query parameter after must be a page's next"},
			{"after too long", "after=" + long, "query parameter after must be a page's next"},
			{"after given twice", "after=a&after=b", "after is given 2 times"},
			{"a parameter of another route", "since=2026-01-01T00:00:00Z", `"since" is not taken here; this route takes after, max`},
		} {
			t.Run(path+": "+tc.name, func(t *testing.T) {
				r := doRequest(t, http.MethodGet, hs.URL+path+"?"+tc.query, "admin-token", "")
				require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
				require.Equal(t, pigeon.CodeBadRequest, r.code(t))
				require.Contains(t, r.message(t), tc.says)
			})
		}
		r := doRequest(t, http.MethodGet, hs.URL+path+"?max=20000&after=", "admin-token", "")
		require.Equal(t, http.StatusOK, r.status, "%s: a max above the cap is the cap; an empty after the first page: %s", path, r.body)
	}
	r := doRequest(t, http.MethodGet, hs.URL+"/v1/programs?after=Upper", "admin-token", "")
	require.Equal(t, http.StatusBadRequest, r.status, "a program name is lower case: %s", r.body)
	require.Contains(t, r.message(t), "a program name")
	r = doRequest(t, http.MethodGet, hs.URL+"/v1/accounts?after=spiffe://test/x", "a-token", "")
	require.Equal(t, http.StatusForbidden, r.status, "the role comes first: %s", r.body)
}

// TestNameListingDefaultPageIsBounded: without parameters GET
// /v1/accounts and /v1/roles answer at most 10,000 entries (maxRecords,
// the cap of every listing page) and next, the last of them; the page
// after it holds the rest. Before, a GET answered the whole directory in
// one body, built and marshalled in memory: hundreds of MB for a large
// one, and no client could bound what it read.
func TestNameListingDefaultPageIsBounded(t *testing.T) {
	const pageCap = 10000
	f := newFixture(t)
	ctx := context.Background()
	for i := range pageCap + 1 {
		_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: fmt.Sprintf("spiffe://test/sa/%05d", i)})
		require.NoError(t, err)
		_, err = f.e.PutRole(ctx, pigeon.Role{Name: fmt.Sprintf("role-%05d", i)})
		require.NoError(t, err)
	}
	for _, l := range []struct {
		path, field, key, last string
	}{
		{"/v1/accounts", "accounts", "id", fmt.Sprintf("spiffe://test/sa/%05d", pageCap-1)},
		{"/v1/roles", "roles", "name", fmt.Sprintf("role-%05d", pageCap-1)},
	} {
		t.Run(l.field, func(t *testing.T) {
			p := getNamePage(t, f.hs.URL, l.path, l.field, l.key, "admin-token", nil)
			require.Equal(t, pageCap, len(p.names), "a default page holds at most the cap")
			require.True(t, slices.IsSorted(p.names))
			require.Equal(t, l.last, p.next)
			rest := getNamePage(t, f.hs.URL, l.path, l.field, l.key, "admin-token", url.Values{"after": {p.next}})
			require.Empty(t, rest.next)
			require.NotEmpty(t, rest.names)
			require.Greater(t, rest.names[0], l.last)
		})
	}
}
