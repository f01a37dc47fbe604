package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestListingPageOverTheServersCapIsRefused: a page of `quarantine list`,
// `audit receipts --url` or `audit tail` holds at most maxPageRecords
// records, the server's cap of ?max= (maxRecords in server/routes.go). A
// page of exactly that many is read and printed; one of more is no
// server's, and the command fails with an error naming the cap before it
// prints a record of that page. Before, `quarantine list` and `audit
// tail` printed the page whole, and `audit receipts` decoded every
// receipt before it counted them.
func TestListingPageOverTheServersCapIsRefused(t *testing.T) {
	base := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	quarantined := func(n int) any {
		rs := make([]map[string]any, n)
		for i := range rs {
			rs[i] = map[string]any{"id": fmt.Sprintf("q-%05d", i), "time": base.Add(time.Duration(i) * time.Millisecond)}
		}
		return map[string]any{"records": rs}
	}
	receipts := func(n int) any {
		rs := make([]pigeon.Receipt, n)
		for i := range rs {
			rs[i] = pigeon.Receipt{Event: pigeon.EventReplayExecuted, Principal: "p", AuditSeq: uint64(i) + 1, Seq: 1}
		}
		return map[string]any{"receipts": rs}
	}
	audited := func(n int) any {
		rs := make([]pigeon.AuditRecord, n)
		for i := range rs {
			rs[i] = pigeon.AuditRecord{Seq: uint64(i) + 1, Type: string(pigeon.EventAccessDenied), Principal: "p"}
		}
		return map[string]any{"records": rs}
	}
	for _, tc := range []struct {
		name string
		args []string
		id   []string        // after the client flags
		page func(n int) any // the first answer; every later one lists none
	}{
		{"quarantine list", []string{"quarantine", "list", "--max", "-1"}, nil, quarantined},
		{"audit receipts", []string{"audit", "receipts"}, []string{"msg_x"}, receipts},
		{"audit tail", []string{"audit", "tail"}, nil, audited},
	} {
		run := func(t *testing.T, n int) (code int, stdout, stderr string) {
			var calls atomic.Int64
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) > 1 {
					_, _ = w.Write([]byte(`{"records":[],"receipts":[]}`))
					return
				}
				_ = json.NewEncoder(w).Encode(tc.page(n))
			}))
			t.Cleanup(hs.Close)
			var out, errs strings.Builder
			code = Main(t.Context(), append(append(tc.args, "--url", hs.URL, "--token", "t"), tc.id...), &out, &errs)
			return code, out.String(), errs.String()
		}
		t.Run(tc.name+", a full page", func(t *testing.T) {
			code, stdout, stderr := run(t, maxPageRecords)
			require.Equal(t, 0, code, "stderr %s", stderr)
			require.Equal(t, maxPageRecords, strings.Count(stdout, "\n"))
		})
		t.Run(tc.name+", one record more", func(t *testing.T) {
			code, stdout, stderr := run(t, maxPageRecords+1)
			require.Equal(t, 1, code, "stderr %s", stderr)
			require.Contains(t, stderr, fmt.Sprintf("more than %d records in one page", maxPageRecords))
			require.Empty(t, stdout, "no record of the page is printed")
		})
	}
}

// TestRecordPageIsRefusedBeforeItsEntriesAreDecoded: an answer listing
// far more records than a page holds (`{}` each, the fewest bytes a
// record takes) fails json.Unmarshal without decoding its entries: a
// handful of allocations, not one a record.
func TestRecordPageIsRefusedBeforeItsEntriesAreDecoded(t *testing.T) {
	answer := []byte(`{"records":[` + strings.Repeat(`{},`, 20*maxPageRecords) + `{}]}`)
	var err error
	allocs := testing.AllocsPerRun(1, func() {
		var out struct {
			Records recordPage[json.RawMessage] `json:"records"`
		}
		err = json.Unmarshal(answer, &out)
	})
	require.ErrorContains(t, err, fmt.Sprintf("more than %d records", maxPageRecords))
	require.Less(t, allocs, float64(100), "allocations")

	for _, tc := range []struct {
		list string
		want int
	}{
		{`[]`, 0},
		{` [ ] `, 0},
		{`null`, 0},
		{`[{}]`, 1},
		{`[ {"a":[1,2,{"b":","}],"c":"],[\"{"} , 2,"x,y" ,[3,4]]`, 4},
		{`["\\", "\\\"", ","]`, 3},
	} {
		require.Equal(t, tc.want, entries([]byte(tc.list), 10), tc.list)
	}
	require.Equal(t, 4, entries([]byte(`[1,2,3,4,5,6]`), 3), "one past the most, then no further")
}
