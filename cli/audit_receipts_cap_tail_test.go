package cli

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestAuditTailEndsOnAServerThatDoesNotMoveOn: `pigeon audit tail`
// (without --follow) reads pages of 1,000 records from --from until a
// page is not full. A server whose full pages do not move the reading on
// (the same page again, records out of order, or a record numbered
// 2^64-1, after which the next page asked was from 0 again) kept it
// reading and printing for as long as it was answered. Each record must
// now come after the one printed before it (and from --from on),
// otherwise the command ends with an error (exit 1) after the records it
// printed; after a record numbered 2^64-1, which no record can follow, it
// ends (exit 0). A server that answers as Pigeon does is read to its head
// (exit 0).
func TestAuditTailEndsOnAServerThatDoesNotMoveOn(t *testing.T) {
	page := func(first uint64, n int, step int64) []pigeon.AuditRecord {
		rs := make([]pigeon.AuditRecord, n)
		for i := range rs {
			rs[i] = pigeon.AuditRecord{Seq: uint64(int64(first) + int64(i)*step), Type: "publish.accepted"}
		}
		return rs
	}
	for _, tc := range []struct {
		name   string
		answer func(from uint64) []pigeon.AuditRecord
		code   int
		lines  int // records printed
	}{
		{"as Pigeon answers: 2,500 records", func(from uint64) []pigeon.AuditRecord {
			return page(from, int(min(1000, 2501-from)), 1)
		}, 0, 2500},
		{"the first page again", func(uint64) []pigeon.AuditRecord { return page(1, 1000, 1) }, 1, 1000},
		{"records before --from", func(from uint64) []pigeon.AuditRecord { return page(from-1, 1000, 1) }, 1, 0},
		{"records out of order", func(from uint64) []pigeon.AuditRecord { return page(from+999, 1000, -1) }, 1, 1},
		{"a record numbered 2^64-1, then from 0", func(from uint64) []pigeon.AuditRecord {
			if from == 1 {
				return page(math.MaxUint64-999, 1000, 1)
			}
			return page(from, 1000, 1)
		}, 0, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) > 10 {
					http.Error(w, "enough", http.StatusTeapot)
					return
				}
				from, err := strconv.ParseUint(r.URL.Query().Get("from"), 10, 64)
				require.NoError(t, err)
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(map[string]any{"records": tc.answer(from)})
			}))
			t.Cleanup(hs.Close)
			var stdout, stderr strings.Builder
			code := Main(t.Context(), []string{"audit", "tail", "--url", hs.URL, "--token", "t", "--from", "1"}, &stdout, &stderr)
			require.Equal(t, tc.code, code, "stderr %s", stderr.String())
			require.Equal(t, tc.lines, strings.Count(stdout.String(), "\n"))
			require.NotContains(t, stderr.String(), "enough", "the command ended on its own")
			if tc.code != 0 {
				require.Contains(t, stderr.String(), "does not come after")
			}
		})
	}
}
