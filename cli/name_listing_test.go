package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// nameListingCmds are the listings the server pages by id or name: the
// command, the path it reads, the list its answers hold and the member
// that names an entry.
var nameListingCmds = []struct {
	args             []string
	path, field, key string
}{
	{[]string{"account", "list"}, "/v1/accounts", "accounts", "id"},
	{[]string{"role", "list"}, "/v1/roles", "roles", "name"},
	{[]string{"program", "list"}, "/v1/programs", "programs", "name"},
}

// pagedNames serves, at path, the entries named names (sorted) as Pigeon
// pages them: at most ?max= (pageSize when it is not given) after ?after=,
// with next while more follow. It counts the requests in calls and
// answers 418 past 50 of them.
func pagedNames(t *testing.T, path, field, key string, names []string, pageSize int, calls *atomic.Int64) *httptest.Server {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) > 50 || r.URL.Path != path {
			http.Error(w, "enough", http.StatusTeapot)
			return
		}
		q := r.URL.Query()
		n := pageSize
		if m, err := strconv.Atoi(q.Get("max")); err == nil && m > 0 {
			n = min(m, pageSize)
		}
		i, _ := slices.BinarySearch(names, q.Get("after"))
		if i < len(names) && names[i] == q.Get("after") {
			i++
		}
		out := map[string]any{}
		page := []map[string]any{}
		for _, name := range names[i:min(i+n, len(names))] {
			page = append(page, map[string]any{key: name, "note": "entry " + name})
		}
		out[field] = page
		if i+n < len(names) {
			out["next"] = names[i+n-1]
		}
		w.Header().Set("Content-Type", "application/json")
		require.NoError(t, json.NewEncoder(w).Encode(out))
	}))
	t.Cleanup(hs.Close)
	return hs
}

// printedNames reads the entries a listing printed, one JSON document a
// line, and returns their key.
func printedNames(t *testing.T, stdout, key string) []string {
	t.Helper()
	var got []string
	for l := range strings.Lines(stdout) {
		var e map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &e), "stdout is JSON lines alone: %q", l)
		got = append(got, e[key].(string))
	}
	return got
}

// TestNameListingsFollowPages: `pigeon account list`, `role list` and
// `program list` read the server's pages one after the other, following
// next, and print each entry once, in order, one JSON document a line.
// With --max N they print at most N, asking for no more than they need;
// when more follow, they name the next page (--after the Nth) on stderr
// and exit 3, and that page given back goes on where they stopped. With N
// entries or fewer they end 0. Before, each read one answer of the whole
// directory and printed it as one document.
func TestNameListingsFollowPages(t *testing.T) {
	names := []string{"a-0", "a-1", "b-2", "b-3", "c-4", "c-5", "d-6"}
	for _, c := range nameListingCmds {
		for _, tc := range []struct {
			name  string
			args  []string
			code  int
			lines []string
			next  string // named on stderr when code is 3
			calls int64  // the most requests made
		}{
			{name: "no --max", lines: names, calls: 3},
			{name: "fewer than --max", args: []string{"--max", "10"}, lines: names, calls: 3},
			{name: "exactly --max", args: []string{"--max", "7"}, lines: names, calls: 3},
			{name: "more than --max", args: []string{"--max", "4"}, code: 3, lines: names[:4], next: "b-3", calls: 2},
			{name: "--max 1", args: []string{"--max", "1"}, code: 3, lines: names[:1], next: "a-0", calls: 1},
			{name: "the next page named", args: []string{"--max", "4", "--after", "b-3"}, lines: names[4:], calls: 1},
			{name: "after a name no entry holds", args: []string{"--after", "b"}, lines: names[2:], calls: 2},
			{name: "negative --max: every entry", args: []string{"--max", "-1"}, lines: names, calls: 3},
		} {
			t.Run(strings.Join(c.args, " ")+", "+tc.name, func(t *testing.T) {
				var calls atomic.Int64
				hs := pagedNames(t, c.path, c.field, c.key, names, 3, &calls)
				var stdout, stderr strings.Builder
				args := append(append(slices.Clone(c.args), "--url", hs.URL, "--token", "t"), tc.args...)
				code := Main(t.Context(), args, &stdout, &stderr)
				require.Equal(t, tc.code, code, "stderr %s", stderr.String())
				require.Equal(t, tc.lines, printedNames(t, stdout.String(), c.key))
				require.LessOrEqual(t, calls.Load(), tc.calls, "requests made")
				if tc.code == 3 {
					require.Contains(t, stderr.String(), fmt.Sprintf("only the first %d are printed; the next page is --after %s", len(tc.lines), tc.next))
				} else {
					require.Empty(t, stderr.String())
				}
			})
		}
	}
}

// TestNameListingsDefaultMax: without --max (or with --max 0) the listings
// print at most defaultMaxNames entries of a server that lists more, then
// name the next page and exit 3; a negative --max prints every one.
func TestNameListingsDefaultMax(t *testing.T) {
	names := make([]string, defaultMaxNames+5)
	for i := range names {
		names[i] = fmt.Sprintf("n-%05d", i)
	}
	for _, c := range nameListingCmds {
		for _, tc := range []struct {
			name  string
			args  []string
			code  int
			lines int
		}{
			{"no --max", nil, 3, defaultMaxNames},
			{"--max 0", []string{"--max", "0"}, 3, defaultMaxNames},
			{"negative --max", []string{"--max", "-1"}, 0, len(names)},
		} {
			t.Run(strings.Join(c.args, " ")+", "+tc.name, func(t *testing.T) {
				var calls atomic.Int64
				hs := pagedNames(t, c.path, c.field, c.key, names, 400, &calls)
				var stdout, stderr strings.Builder
				code := Main(t.Context(), append(append(slices.Clone(c.args), "--url", hs.URL, "--token", "t"), tc.args...), &stdout, &stderr)
				require.Equal(t, tc.code, code, "stderr %s", stderr.String())
				require.Equal(t, names[:tc.lines], printedNames(t, stdout.String(), c.key))
				if tc.code == 3 {
					require.Contains(t, stderr.String(), fmt.Sprintf("more than %d %s are listed: only the first %d are printed; the next page is --after %s",
						tc.lines, c.field, tc.lines, names[tc.lines-1]))
					require.Contains(t, stderr.String(), "a negative --max prints every one")
				}
			})
		}
	}
}

// TestNameListingsPrintEachPageFirst: asked for every entry of a server
// that answers without end, the listings print each page before they ask
// for the next, so they hold one page, not every entry read.
func TestNameListingsPrintEachPageFirst(t *testing.T) {
	const pages = 5
	for _, c := range nameListingCmds {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var stdout lockedBuffer
			var calls atomic.Int64
			seen := make([]int, 0, pages)
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				k := int(calls.Add(1)) - 1
				if k >= pages {
					http.Error(w, "enough", http.StatusTeapot)
					return
				}
				seen = append(seen, strings.Count(stdout.String(), "\n")) // one request at a time
				page := make([]map[string]any, 3)
				for i := range page {
					page[i] = map[string]any{c.key: fmt.Sprintf("e-%05d", k*3+i)}
				}
				_ = json.NewEncoder(w).Encode(map[string]any{c.field: page, "next": page[2][c.key]})
			}))
			t.Cleanup(hs.Close)
			var stderr strings.Builder
			code := Main(t.Context(), append(slices.Clone(c.args), "--url", hs.URL, "--token", "t", "--max", "-1"), &stdout, &stderr)
			require.Equal(t, 1, code, "stderr %s", stderr.String())
			require.Contains(t, stderr.String(), "enough")
			require.Equal(t, []int{0, 3, 6, 9, 12}, seen, "each page printed before the next is asked for")
		})
	}
}

// TestNameListingsRefuseAServerThatDoesNotMoveOn: a page whose entries do
// not come after the one printed before (the same page again, entries
// back in the order), a next that is not the page's last entry, a next
// after an empty page, or a page of more entries than the server ever
// sends ends the listing with an error (exit 1) after what it printed,
// rather than read for as long as the server answers.
func TestNameListingsRefuseAServerThatDoesNotMoveOn(t *testing.T) {
	entries := func(key string, names ...string) []map[string]any {
		out := []map[string]any{}
		for _, n := range names {
			out = append(out, map[string]any{key: n})
		}
		return out
	}
	for _, c := range nameListingCmds {
		for _, tc := range []struct {
			name    string
			answer  func(after string) map[string]any
			printed int
			says    string
		}{
			{"the same page again", func(string) map[string]any {
				return map[string]any{c.field: entries(c.key, "a", "b"), "next": "b"}
			}, 2, `"a" does not come after "b"`},
			{"entries out of order", func(string) map[string]any {
				return map[string]any{c.field: entries(c.key, "b", "a")}
			}, 1, `"a" does not come after "b"`},
			{"a next that is not the last entry", func(string) map[string]any {
				return map[string]any{c.field: entries(c.key, "a", "b"), "next": "a"}
			}, 2, "its pages do not move on"},
			{"a next after an empty page", func(string) map[string]any {
				return map[string]any{c.field: entries(c.key), "next": "z"}
			}, 0, "its pages do not move on"},
			{"an entry without its name", func(string) map[string]any {
				return map[string]any{c.field: []map[string]any{{"other": "x"}}}
			}, 0, "without its " + c.key},
			{"no list", func(string) map[string]any { return map[string]any{"other": []any{}} }, 0, fmt.Sprintf("holds no %q list", c.field)},
			{"a page over the cap", func(string) map[string]any {
				names := make([]string, maxPageRecords+1)
				for i := range names {
					names[i] = fmt.Sprintf("n-%05d", i)
				}
				return map[string]any{c.field: entries(c.key, names...)}
			}, 0, fmt.Sprintf("more than %d records in one page", maxPageRecords)},
		} {
			t.Run(strings.Join(c.args, " ")+", "+tc.name, func(t *testing.T) {
				var calls atomic.Int64
				hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if calls.Add(1) > 10 {
						http.Error(w, "enough", http.StatusTeapot)
						return
					}
					_ = json.NewEncoder(w).Encode(tc.answer(r.URL.Query().Get("after")))
				}))
				t.Cleanup(hs.Close)
				var stdout, stderr strings.Builder
				code := Main(t.Context(), append(slices.Clone(c.args), "--url", hs.URL, "--token", "t", "--max", "-1"), &stdout, &stderr)
				require.Equal(t, 1, code, "stderr %s", stderr.String())
				require.Contains(t, stderr.String(), tc.says)
				require.NotContains(t, stderr.String(), "enough", "the command ended on its own")
				require.Equal(t, tc.printed, strings.Count(stdout.String(), "\n"))
			})
		}
	}
}

// TestAccountListPagesARealServer: against `pigeon serve`, `account list
// --max 2` prints the first two accounts by id and names the next page;
// given back page after page it lists every account once, in order.
func TestAccountListPagesARealServer(t *testing.T) {
	t.Setenv("PIGEON_TOKEN", "admin-token")
	ctx := context.Background()
	r := startServe(t, serveConfig{})
	var ids []string
	for i := range 5 {
		id := fmt.Sprintf("spiffe://test/ns/x/sa/svc-%d", (i*2)%5)
		exit, _, stderr := r.pigeon(t, ctx, "account", "create", id)
		require.Equal(t, 0, exit, stderr)
		ids = append(ids, id)
	}
	exit, stdout, stderr := r.pigeon(t, ctx, "account", "list", "--max", "-1")
	require.Equal(t, 0, exit, stderr)
	all := printedNames(t, stdout, "id")
	require.Subset(t, all, ids)
	require.True(t, slices.IsSorted(all), "by id")

	var got []string
	args := []string{"account", "list", "--max", "2"}
	for range len(all) {
		exit, stdout, stderr := r.pigeon(t, ctx, args...)
		got = append(got, printedNames(t, stdout, "id")...)
		if exit == 0 {
			break
		}
		require.Equal(t, 3, exit, stderr)
		_, next, ok := strings.Cut(strings.TrimSpace(stderr), "the next page is --after ")
		require.True(t, ok, stderr)
		next, _, _ = strings.Cut(next, " ")
		args = []string{"account", "list", "--max", "2", "--after", next}
	}
	require.Equal(t, all, got, "each account once, in order")
}
