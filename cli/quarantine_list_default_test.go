package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestQuarantineListDefaultMax: without --max (or with --max 0), `pigeon
// quarantine list` prints at most defaultMaxQuarantine records of a
// server that lists more, then names the next page on stderr and exits 3;
// stdout holds those records alone, one JSON document a line. A negative
// --max prints every record. Before, a run without --max read the whole
// quarantine of the server, page after page.
func TestQuarantineListDefaultMax(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	all := make([]quarantineMaxRec, defaultMaxQuarantine+5)
	for i := range all {
		all[i] = quarantineMaxRec{ID: fmt.Sprintf("q-%05d", i), Time: base.Add(time.Duration(i) * time.Millisecond)}
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		n, _ := strconv.Atoi(q.Get("max"))
		if n <= 0 || n > 100 {
			n = 100 // the server's own page
		}
		var out []quarantineMaxRec
		for _, rec := range all {
			if since := q.Get("since"); since != "" {
				at, err := time.Parse(time.RFC3339Nano, since)
				require.NoError(t, err)
				if rec.Time.Before(at) || rec.Time.Equal(at) && rec.ID <= q.Get("after") {
					continue
				}
			}
			if out = append(out, rec); len(out) == n {
				break
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"records": out})
	}))
	t.Cleanup(hs.Close)
	for _, tc := range []struct {
		name  string
		args  []string
		code  int
		lines int
	}{
		{"no --max", nil, 3, defaultMaxQuarantine},
		{"--max 0", []string{"--max", "0"}, 3, defaultMaxQuarantine},
		{"negative --max", []string{"--max", "-1"}, 0, len(all)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := Main(t.Context(), append([]string{"quarantine", "list", "--url", hs.URL, "--token", "t"}, tc.args...), &stdout, &stderr)
			require.Equal(t, tc.code, code, "stderr %s", stderr.String())
			var got []string
			for l := range strings.Lines(stdout.String()) {
				var r quarantineMaxRec
				require.NoError(t, json.Unmarshal([]byte(l), &r), "stdout is JSON lines alone")
				got = append(got, r.ID)
			}
			require.Equal(t, quarantineMaxIDs(all[:tc.lines]), got)
			if tc.code == 3 {
				last := all[tc.lines-1]
				require.Contains(t, stderr.String(), fmt.Sprintf("only the first %d are printed; the next page is --since %s --after %s",
					tc.lines, last.Time.Format(time.RFC3339Nano), last.ID))
				require.Contains(t, stderr.String(), "a negative --max prints every record")
			} else {
				require.Empty(t, stderr.String())
			}
		})
	}
}
