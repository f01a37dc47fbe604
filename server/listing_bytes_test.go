package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/server"
)

// rawNamePage is one page of GET /v1/accounts, /v1/roles or /v1/programs
// as it was sent: its entries' own bytes, their names, the bytes between
// the brackets of its list (the entries and the commas between them),
// and its next.
type rawNamePage struct {
	entries []json.RawMessage
	names   []string
	listed  int
	next    string
}

// getRawNamePage asks path (a listing answering field, each entry named
// by key) for the page after after, as admin, and reads it.
func getRawNamePage(t *testing.T, base, path, field, key, after string) rawNamePage {
	t.Helper()
	u := base + path
	if after != "" {
		u += "?" + url.Values{"after": {after}}.Encode()
	}
	r := doRequest(t, http.MethodGet, u, "admin-token", "")
	require.Equal(t, http.StatusOK, r.status, "%.300s", r.body)
	var body map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(r.body, &body))
	var p rawNamePage
	require.NoError(t, json.Unmarshal(body[field], &p.entries), "%s is a list", field)
	p.listed = len(bytes.TrimSpace(body[field])) - len("[]")
	for _, e := range p.entries {
		var named map[string]any
		require.NoError(t, json.Unmarshal(e, &named))
		p.names = append(p.names, named[key].(string))
	}
	if raw, ok := body["next"]; ok {
		require.NoError(t, json.Unmarshal(raw, &p.next))
		require.NotEmpty(t, p.next, "next is left out rather than empty")
	}
	return p
}

// walkRawNamePages reads every page of path with the default max,
// following next, and returns them.
func walkRawNamePages(t *testing.T, base, path, field, key string) []rawNamePage {
	t.Helper()
	var pages []rawNamePage
	after := ""
	for {
		require.LessOrEqual(t, len(pages), 1000, "the pages end")
		p := getRawNamePage(t, base, path, field, key, after)
		pages = append(pages, p)
		if p.next == "" {
			return pages
		}
		require.NotEmpty(t, p.names, "a page that names a next one holds an entry")
		require.Equal(t, p.names[len(p.names)-1], p.next, "next is the page's last entry")
		after = p.next
	}
}

// namesOf is the names the pages list, in order.
func namesOf(pages []rawNamePage) []string {
	var out []string
	for _, p := range pages {
		out = append(out, p.names...)
	}
	return out
}

// bigAccount is an account as large as the write path lets one be, in
// the JSON of an answer: 64 attributes, each with a name of 256 bytes and
// a value of 1,024 bytes that JSON writes as 6,144 ("<" is "\u003c").
func bigAccount(id string) pigeon.Account {
	attrs := make(map[string]string, pigeon.MaxAccountAttributes)
	for i := range pigeon.MaxAccountAttributes {
		name := fmt.Sprintf("attr-%02d-", i)
		attrs[name+strings.Repeat("n", pigeon.MaxAttributeNameLength-len(name))] = strings.Repeat("<", pigeon.MaxAttributeValueLength)
	}
	return pigeon.Account{ID: id, Attributes: attrs}
}

// TestAccountPageEndsAtItsByteBudget: a page of GET /v1/accounts holds
// entries up to a byte budget (server.MaxPageBytes, 4 MiB of encoded
// entries), not only up to max: a page of the largest accounts the write
// path takes (about 400 KB each in JSON) ends at the entry that would take
// it past the budget, with next naming its last entry, well before the
// default max of 10,000. Before, the page held up to 10,000 of them: an
// answer of about 4 GB, built whole in memory. Walking the pages by next
// lists every account exactly once, in order.
func TestAccountPageEndsAtItsByteBudget(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for i := range 30 {
		_, err := f.e.CreateAccount(ctx, bigAccount(fmt.Sprintf("spiffe://test/sa/big-%02d", i)))
		require.NoError(t, err)
	}
	var all []string
	size := map[string]int{}
	for _, a := range f.e.ListAccounts(ctx) {
		all = append(all, a.ID)
		b, err := json.Marshal(a)
		require.NoError(t, err)
		size[a.ID] = len(b)
	}
	budget := server.MaxPageBytes()
	require.Equal(t, 4<<20, budget)

	pages := walkRawNamePages(t, f.hs.URL, "/v1/accounts", "accounts", "id")
	require.Equal(t, all, namesOf(pages), "every account once, in order")
	require.Greater(t, len(pages), 2, "the accounts take several pages")
	for i, p := range pages {
		require.LessOrEqual(t, p.listed, budget, "page %d: its entries within the budget", i)
		for j, e := range p.entries {
			require.Equal(t, size[p.names[j]], len(e), "page %d: an entry is sent as the account encodes", i)
		}
		if p.next != "" {
			following := size[all[slices.Index(all, p.next)+1]]
			require.Greater(t, p.listed+1+following, budget, "page %d: it ends only where the next entry would take it past the budget", i)
		}
	}
}

// TestNameListingPagesEndAtTheByteBudget: GET /v1/accounts, /v1/roles and
// /v1/programs end a page at the byte budget alike. With a budget smaller
// than any entry, every page holds one entry, listed whole however large
// it is, and names it as next, so that paging moves on; with a budget of
// two of the largest entries, every page holds two or more and stays
// within it. Either way walking the pages by next lists every entry
// exactly once, in order.
func TestNameListingPagesEndAtTheByteBudget(t *testing.T) {
	e, _, hs := programsServer(t)
	ctx := context.Background()
	var roles, progs []string
	for i := range 6 {
		_, err := e.CreateAccount(ctx, pigeon.Account{ID: fmt.Sprintf("spiffe://test/ns/a/sa/acct-%d", i)})
		require.NoError(t, err)
		name := fmt.Sprintf("role-%d", i)
		_, err = e.PutRole(ctx, pigeon.Role{Name: name, Permissions: []pigeon.Permission{{Subject: "jobs.in", Operations: []pigeon.Operation{pigeon.OpReceive}}}})
		require.NoError(t, err)
		roles = append(roles, name)
		prog := fmt.Sprintf("prog-%d", i)
		r := doRequest(t, http.MethodPut, hs.URL+"/v1/programs/"+prog, "admin-token", deployBody(t, progA))
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
		progs = append(progs, prog)
	}
	var accounts []string
	for _, a := range e.ListAccounts(ctx) {
		accounts = append(accounts, a.ID)
	}
	for _, l := range []struct {
		path, field, key string
		want             []string
	}{
		{"/v1/accounts", "accounts", "id", accounts},
		{"/v1/roles", "roles", "name", roles},
		{"/v1/programs", "programs", "name", progs},
	} {
		whole := getRawNamePage(t, hs.URL, l.path, l.field, l.key, "")
		require.Equal(t, l.want, whole.names, "%s: within the default budget, one page", l.field)
		require.Empty(t, whole.next)
		largest := 0
		for _, e := range whole.entries {
			largest = max(largest, len(e))
		}
		t.Run(l.field+": every entry past the budget", func(t *testing.T) {
			defer server.SetMaxPageBytes(1)()
			pages := walkRawNamePages(t, hs.URL, l.path, l.field, l.key)
			require.Equal(t, l.want, namesOf(pages), "every entry once, in order")
			for i, p := range pages {
				require.Len(t, p.names, 1, "page %d: an entry larger than the budget is listed alone", i)
				require.Equal(t, string(whole.entries[i]), string(p.entries[0]), "page %d: listed whole", i)
			}
		})
		t.Run(l.field+": two entries within the budget", func(t *testing.T) {
			budget := 2*largest + 1
			defer server.SetMaxPageBytes(budget)()
			pages := walkRawNamePages(t, hs.URL, l.path, l.field, l.key)
			require.Equal(t, l.want, namesOf(pages), "every entry once, in order")
			for i, p := range pages {
				require.LessOrEqual(t, p.listed, budget, "page %d: its entries within the budget", i)
				if p.next != "" {
					require.GreaterOrEqual(t, len(p.names), 2, "page %d", i)
				}
			}
			require.Less(t, len(pages), len(l.want), "a page holds several entries")
			require.Greater(t, len(pages), 1, "the entries take several pages")
		})
	}
}
