package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestListingsHoldOnePageAtATime: the remote listing commands asked for
// every record (`--url … --max -1`) against a server that answers
// without end print each page before they ask for the next, so that they
// hold one page, not every record read: when the server is asked for page
// k, the records of the pages before it are on stdout. Before, `audit
// receipts` held every receipt (up to maxAllReceipts of a size the server
// chose) and printed none until the last page. One answer larger than
// maxAnswerBytes (a body without end) ends the command with an error
// that says so; before, the answer was cut there and read as JSON that
// ends too soon.
func TestListingsHoldOnePageAtATime(t *testing.T) {
	const pages = 5
	big := strings.Repeat("p", 4096) // each record a few KiB of the server's text
	receiptPage := func(r *http.Request, page int) any {
		a, err := pigeon.ParseReceiptCursor(r.URL.Query().Get("after"))
		require.NoError(t, err)
		rs := make([]pigeon.Receipt, 3)
		for i := range rs {
			rs[i] = pigeon.Receipt{Event: pigeon.EventReplayExecuted, Principal: big, AuditSeq: a.AuditSeq + uint64(i) + 1, Seq: 7}
		}
		return map[string]any{"receipts": rs, "next": rs[2].Cursor().String()}
	}
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	quarantinePage := func(_ *http.Request, page int) any {
		rs := make([]map[string]any, 3)
		for i := range rs {
			n := page*3 + i
			rs[i] = map[string]any{"id": fmt.Sprintf("q-%05d", n), "time": base.Add(time.Duration(n) * time.Second), "reason": big}
		}
		return map[string]any{"records": rs}
	}
	for _, tc := range []struct {
		name   string
		args   []string
		id     []string // after the client flags
		answer func(r *http.Request, page int) any
	}{
		{"audit receipts", []string{"audit", "receipts", "--max", "-1"}, []string{"msg_x"}, receiptPage},
		{"quarantine list", []string{"quarantine", "list", "--max", "-1"}, nil, quarantinePage},
	} {
		t.Run(tc.name+", endless pages", func(t *testing.T) {
			var stdout lockedBuffer
			var calls atomic.Int64
			seen := make([]int, 0, pages) // the lines on stdout as each page is asked for
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				k := int(calls.Add(1)) - 1
				if k >= pages {
					http.Error(w, "enough", http.StatusTeapot)
					return
				}
				seen = append(seen, strings.Count(stdout.String(), "\n")) // one request at a time
				_ = json.NewEncoder(w).Encode(tc.answer(r, k))
			}))
			t.Cleanup(hs.Close)
			var stderr strings.Builder
			code := Main(t.Context(), append(append(tc.args, "--url", hs.URL, "--token", "t"), tc.id...), &stdout, &stderr)
			require.Equal(t, 1, code, "stderr %s", stderr.String())
			require.Contains(t, stderr.String(), "enough")
			require.Equal(t, []int{0, 3, 6, 9, 12}, seen, "each page printed before the next is asked for")
			require.Equal(t, 3*pages, strings.Count(stdout.String(), "\n"))
		})
		t.Run(tc.name+", an answer without end", func(t *testing.T) {
			old := maxAnswerBytes
			maxAnswerBytes = 1 << 20
			t.Cleanup(func() { maxAnswerBytes = old })
			var written atomic.Int64
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, `{"receipts":[{"principal":"`)
				chunk := []byte(strings.Repeat("x", 64<<10))
				for r.Context().Err() == nil && written.Load() < 64<<20 {
					n, err := w.Write(chunk)
					written.Add(int64(n))
					if err != nil {
						return
					}
				}
			}))
			t.Cleanup(hs.Close)
			var stdout, stderr strings.Builder
			code := Main(t.Context(), append(append(tc.args, "--url", hs.URL, "--token", "t"), tc.id...), &stdout, &stderr)
			require.Equal(t, 1, code, "stderr %s", stderr.String())
			require.Contains(t, stderr.String(), fmt.Sprintf("is larger than %d bytes", 1<<20))
			require.Empty(t, stdout.String())
		})
	}
}
