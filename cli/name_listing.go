package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// defaultMaxNames is the most entries `pigeon account list`, `role list`
// and `program list` print when --max is not given (or is 0): a directory
// may hold hundreds of thousands of accounts, so a run without --max stops
// there, as `quarantine list` stops at defaultMaxQuarantine, and names the
// next page. A negative --max prints every entry, a page at a time.
const defaultMaxNames = 1000

// nameListing is a listing the server pages by id or name (GET
// /v1/accounts, /v1/roles, /v1/programs; docs/http.md): the entries of
// its answers under field, each named by its member key, and the
// answer's next while more follow.
type nameListing struct {
	cmd   string // "account list"
	noun  string // "accounts", in messages
	path  string // "/v1/accounts"
	field string // "accounts"
	key   string // "id"
	after string // list the entries after this one ("": from the first)
	max   int    // the most printed (0 or negative: every one)
}

// list prints the entries of l, one JSON document a line, in the order
// the server pages them (by id or name), asking for page after page, each
// printed before the next is asked for, until the server names no next
// page or max are printed. Every entry must come after the one printed
// before it (the first after l.after), and a page's next must be its last
// entry: otherwise the server is not moving on (the same page again, two
// pages in turn, entries back in the order), and list returns an error
// after the entries it printed rather than read for as long as it is
// answered. When max are printed and more follow, list stops there and
// returns the last printed: the after of the next page ("" when every
// entry is printed). Without a max, a server that keeps making entries up,
// each after the last, is read for as long as it answers; list holds one
// page (maxAnswerBytes) whatever the number of entries.
func (l nameListing) list(ctx context.Context, a *api, stdout io.Writer) (next string, err error) {
	q := url.Values{}
	if l.after != "" {
		q.Set("after", l.after)
	}
	prev, printed := l.after, 0
	for {
		if l.max > 0 {
			q.Set("max", strconv.Itoa(min(l.max-printed, maxPageRecords)))
		}
		path := l.path
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		b, err := a.do(ctx, http.MethodGet, path, nil)
		if err != nil {
			return "", err
		}
		entries, more, err := l.page(b)
		if err != nil {
			return "", err
		}
		for _, e := range entries {
			name, err := l.name(e)
			if err != nil {
				return "", err
			}
			if name <= prev {
				return "", fmt.Errorf("the server's %s %q does not come after %q: its pages do not move on", l.key, name, prev)
			}
			if l.max > 0 && printed == l.max {
				return prev, nil
			}
			// One line an entry, as the same JSON, terminal-safe: an
			// account's attributes and a manifest are their writers'
			// text.
			var line bytes.Buffer
			if err := json.Compact(&line, e); err != nil {
				return "", err
			}
			_, _ = stdout.Write(append(terminalSafeJSON(line.Bytes()), '\n'))
			prev = name
			printed++
		}
		switch {
		case more == "":
			return "", nil
		case len(entries) == 0 || more != prev:
			return "", fmt.Errorf("the server named %q the next page after a page that ends with %q: its pages do not move on", more, prev)
		case l.max > 0 && printed == l.max:
			return prev, nil
		}
		q.Set("after", more)
	}
}

// page reads one answer of l: its entries (at most maxPageRecords, as
// recordPage reads them) and its next ("" when none follows).
func (l nameListing) page(b []byte) (entries []json.RawMessage, next string, err error) {
	var out map[string]json.RawMessage
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, "", err
	}
	list, ok := out[l.field]
	if !ok {
		return nil, "", fmt.Errorf("the server's answer holds no %q list", l.field)
	}
	var page recordPage[json.RawMessage]
	if err := json.Unmarshal(list, &page); err != nil {
		return nil, "", err
	}
	if raw, ok := out["next"]; ok {
		if err := json.Unmarshal(raw, &next); err != nil {
			return nil, "", fmt.Errorf("the server's next is not a string: %w", err)
		}
	}
	return page, next, nil
}

// name is the id or name of entry e (its member l.key).
func (l nameListing) name(e json.RawMessage) (string, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(e, &fields); err != nil {
		return "", fmt.Errorf("the server listed an entry that is not an object: %w", err)
	}
	var name string
	if raw, ok := fields[l.key]; ok {
		if err := json.Unmarshal(raw, &name); err != nil {
			return "", fmt.Errorf("the server listed an entry whose %s is not a string", l.key)
		}
	}
	if name == "" {
		return "", fmt.Errorf("the server listed an entry without its %s", l.key)
	}
	return name, nil
}

// run lists l with the client a and ends the command: 0 once every entry
// is printed; 3 when more follow the max printed, with the next page named
// on stderr; 1 on a refusal or an error.
func (l nameListing) run(ctx context.Context, a *api, stdout, stderr io.Writer) int {
	next, err := l.list(ctx, a, stdout)
	if err != nil {
		return fail(stderr, l.cmd, err)
	}
	if next != "" {
		fmt.Fprintf(stderr, "pigeon %s: more than %d %s are listed: only the first %d are printed; the next page is --after %s (or raise --max; a negative --max prints every one)\n",
			l.cmd, l.max, l.noun, l.max, printable(next))
		return 3
	}
	return 0
}

// nameListingFlags adds --max and --after of a listing by id or name to
// fs, their help starting with prefix ("list: ", or none) and naming its
// entries noun ("accounts"), each by its key ("account id"). limit returns
// the --max given, defaultMaxNames for 0.
func nameListingFlags(fs *flag.FlagSet, prefix, noun, key string) (limit func() int, after *string) {
	maxN := fs.Int("max", 0, fmt.Sprintf("%sthe most %s printed; beyond it the first are printed, a warning names the next page and the exit code is 3 (0: the default, %d; negative: every one, a page at a time)", prefix, noun, defaultMaxNames))
	after = fs.String("after", "", fmt.Sprintf("%slist the %s after this %s (the next page a run capped by --max names)", prefix, noun, key))
	return func() int {
		if *maxN == 0 {
			return defaultMaxNames
		}
		return *maxN
	}, after
}
