package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestQuarantineListMax: `pigeon quarantine list --max N` prints at most N
// records. When the server lists one more, it prints the first N, names
// the next page (--since the Nth record's time --after its id) and exits
// 3, having asked for no more than it needs; a server that ignores the
// page size it is asked for changes nothing. Before, the command had no
// cap: a server that keeps quarantining records as fast as they are read,
// or one that makes them up, each after the last, kept it reading and
// printing for as long as it answered. With N records or fewer it ends as
// before (exit 0), and the next page it names, given back, goes on from
// where it stopped, printing every record once. A negative --max reads
// every page (without --max the default applies:
// TestQuarantineListDefaultMax).
func TestQuarantineListMax(t *testing.T) {
	base := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	at := func(sec int) quarantineMaxRec {
		return quarantineMaxRec{ID: "q-" + strconv.Itoa(sec), Time: base.Add(time.Duration(sec) * time.Second)}
	}
	var seven []quarantineMaxRec // seven records, two a second, as Pigeon orders them
	for i := range 7 {
		r := at(i / 2)
		r.ID += "-" + strconv.Itoa(i)
		seven = append(seven, r)
	}
	// honest answers the records of all after (since, after), at most max
	// (three when max is not given), as Pigeon does.
	honest := func(all []quarantineMaxRec) func(since, after string, max int) []quarantineMaxRec {
		return func(since, after string, max int) []quarantineMaxRec {
			var s time.Time
			if since != "" {
				var err error
				if s, err = time.Parse(time.RFC3339Nano, since); err != nil {
					return nil
				}
			}
			if max == 0 {
				max = 3
			}
			var out []quarantineMaxRec
			for _, r := range all {
				if r.Time.Before(s) || after != "" && r.Time.Equal(s) && r.ID <= after {
					continue
				}
				if out = append(out, r); len(out) == max {
					break
				}
			}
			return out
		}
	}
	// endless makes a page of three new records up, each after the last,
	// whatever the page size asked.
	endless := func(since, _ string, _ int) []quarantineMaxRec {
		s := base
		if since != "" {
			s, _ = time.Parse(time.RFC3339Nano, since)
		}
		sec := int(s.Sub(base) / time.Second)
		return []quarantineMaxRec{at(sec + 1), at(sec + 2), at(sec + 3)}
	}
	for _, tc := range []struct {
		name   string
		args   []string
		answer func(since, after string, max int) []quarantineMaxRec
		code   int
		lines  []string // ids printed
		next   string   // the next page named, when code is 3
		calls  int64    // the most requests made
	}{
		{name: "endless server, --max 5", args: []string{"--max", "5"}, answer: endless, code: 3,
			lines: []string{"q-1", "q-2", "q-3", "q-4", "q-5"}, next: "--since " + at(5).Time.Format(time.RFC3339Nano) + " --after q-5", calls: 2},
		{name: "endless server, --max 1", args: []string{"--max", "1"}, answer: endless, code: 3,
			lines: []string{"q-1"}, next: "--since " + at(1).Time.Format(time.RFC3339Nano) + " --after q-1", calls: 1},
		{name: "honest server, fewer than --max", args: []string{"--max", "10"}, answer: honest(seven), lines: quarantineMaxIDs(seven), calls: 2},
		{name: "honest server, exactly --max", args: []string{"--max", "7"}, answer: honest(seven), lines: quarantineMaxIDs(seven), calls: 2},
		{name: "honest server, more than --max", args: []string{"--max", "4"}, answer: honest(seven), code: 3,
			lines: quarantineMaxIDs(seven[:4]), next: "--since " + seven[3].Time.Format(time.RFC3339Nano) + " --after " + seven[3].ID, calls: 1},
		{name: "honest server, the next page named", args: []string{"--max", "4", "--since", seven[3].Time.Format(time.RFC3339Nano), "--after", seven[3].ID},
			answer: honest(seven), lines: quarantineMaxIDs(seven[4:]), calls: 2},
		{name: "honest server, no --max", answer: honest(seven), lines: quarantineMaxIDs(seven), calls: 4},
		{name: "--after without --since", args: []string{"--after", "q-1"}, answer: honest(seven), code: 2},
		{name: "negative --max: every record", args: []string{"--max", "-1"}, answer: honest(seven), lines: quarantineMaxIDs(seven), calls: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) > 10 {
					http.Error(w, "enough", http.StatusTeapot)
					return
				}
				q := r.URL.Query()
				maxN, _ := strconv.Atoi(q.Get("max"))
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(map[string]any{"records": tc.answer(q.Get("since"), q.Get("after"), maxN)})
			}))
			t.Cleanup(hs.Close)
			args := append([]string{"quarantine", "list", "--url", hs.URL, "--token", "t"}, tc.args...)
			var stdout, stderr strings.Builder
			code := Main(t.Context(), args, &stdout, &stderr)
			require.Equal(t, tc.code, code, "stderr %s", stderr.String())
			require.NotContains(t, stderr.String(), "enough", "the command ended on its own")
			var got []string
			for l := range strings.Lines(stdout.String()) {
				var r quarantineMaxRec
				require.NoError(t, json.Unmarshal([]byte(l), &r))
				got = append(got, r.ID)
			}
			require.Equal(t, tc.lines, got)
			require.LessOrEqual(t, calls.Load(), tc.calls, "requests made")
			if tc.code == 3 {
				require.Contains(t, stderr.String(), fmt.Sprintf("only the first %d are printed; the next page is %s", len(tc.lines), tc.next))
			}
		})
	}
}

// quarantineMaxRec is a quarantine record as the tests of --max list it.
type quarantineMaxRec struct {
	ID   string    `json:"id"`
	Time time.Time `json:"time"`
}

// quarantineMaxIDs returns the ids of recs.
func quarantineMaxIDs(recs []quarantineMaxRec) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}
