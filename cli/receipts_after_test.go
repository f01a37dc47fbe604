package cli

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAuditReceiptsInPages: `pigeon audit receipts --max N` cut at its cap
// names the next page on stderr (--after AUDITSEQ:SEQ), and following
// those pages prints every receipt of the uncapped run, once, in order. A
// malformed --after is a usage error (exit 2) that prints nothing.
func TestAuditReceiptsInPages(t *testing.T) {
	dir := twelveReceipts(t)
	run := func(args ...string) (int, string, string) {
		return (*running)(nil).pigeon(t, t.Context(), append(append([]string{"audit", "receipts", "--data", dir}, args...), "msg_x")...)
	}
	code, whole, stderr := run()
	require.Equal(t, 0, code, stderr)
	require.Equal(t, 12, strings.Count(whole, "\n"))

	next := regexp.MustCompile(`the next page is --after ([0-9]+:[0-9]+)`)
	var paged strings.Builder
	args := []string{"--max", "5"}
	for pages := 1; ; pages++ {
		require.LessOrEqual(t, pages, 3)
		code, out, stderr := run(args...)
		paged.WriteString(out)
		if code == 0 {
			require.Equal(t, 3, pages)
			require.Empty(t, stderr)
			break
		}
		require.Equal(t, 3, code, stderr)
		m := next.FindStringSubmatch(stderr)
		require.NotNil(t, m, stderr)
		args = []string{"--max", "5", "--after", m[1]}
	}
	require.Equal(t, whole, paged.String())

	for _, bad := range []string{"x", "1:", "-1", "1:2:3"} {
		code, out, stderr := run("--after", bad)
		require.Equal(t, 2, code, bad)
		require.Empty(t, out, bad)
		require.Contains(t, stderr, "--after", bad)
	}
}

// TestAuditReceiptsOnlineStopsAHostileServer: a server whose pages name a
// next that does not come after the last (the same cursor again, an
// earlier one, a malformed one), or hold more receipts than asked, ends
// `pigeon audit receipts --url` with an error (exit 1) rather than making
// it read for ever.
func TestAuditReceiptsOnlineStopsAHostileServer(t *testing.T) {
	for _, tc := range []struct{ name, body string }{
		{"the same next again", `{"receipts":[{"event":"delivery.dispatched","auditSeq":5,"seq":1}],"next":"0:0"}`},
		{"an earlier next", `{"receipts":[],"next":"0:0"}`},
		{"a malformed next", `{"receipts":[],"next":"5:x"}`},
		{"more than asked", `{"receipts":[{"auditSeq":5},{"auditSeq":6}]}`},
		{"no page at all", `[]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(tc.body))
			}))
			t.Cleanup(hs.Close)
			code, _, stderr := (*running)(nil).pigeon(t, t.Context(), "audit", "receipts", "--url", hs.URL, "--token", "t", "--max", "1", "msg_x")
			require.Equal(t, 1, code, stderr)
			require.LessOrEqual(t, calls.Load(), int64(2), "the command stopped")
		})
	}
}
