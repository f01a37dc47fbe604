package cli

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
)

// TestAuditReceiptsOfflineNoCapEnds: offline, `pigeon audit receipts
// --data DIR --max -1` reads at most maxAllReceipts receipts, as it does
// from a server: past it the first are printed, the next page is named and
// the exit code is 3, and the pages from there print the rest, each
// receipt once, in order. The receipts of one id number up to its
// acceptances times the records that list them, so a forged log of k
// acceptances of msg_x and k records listing them all holds k*k receipts
// from 2k records (5,000 of each, a few megabytes: 25 million, held
// before the first is printed). Before, offline a negative --max had no
// cap: every case exited 0 having printed them all.
func TestAuditReceiptsOfflineNoCapEnds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		k       int // acceptances of msg_x, and records listing them all
		ceiling int // maxAllReceipts; 0: the command's own
	}{
		{name: "a ceiling lowered to 1000, 1600 receipts", k: 40, ceiling: 1000},
		{name: "the command's ceiling, 102400 receipts", k: 320},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.ceiling > 0 {
				old := maxAllReceipts
				maxAllReceipts = tc.ceiling
				t.Cleanup(func() { maxAllReceipts = old })
			}
			ceiling, total := maxAllReceipts, tc.k*tc.k
			require.Greater(t, total, ceiling, "the log holds more receipts than the ceiling")
			dir := forgedReceiptsDir(t, tc.k)
			receipts := func(args ...string) (int, string, string) {
				return (*running)(nil).pigeon(t, t.Context(), append(append([]string{"audit", "receipts", "--data", dir}, args...), "msg_x")...)
			}

			code, first, stderr := receipts("--max", "-1")
			require.Equal(t, 3, code, "stderr %s", stderr)
			require.Equal(t, ceiling, strings.Count(first, "\n"))
			require.Contains(t, stderr, fmt.Sprintf("more than %d deliveries of msg_x are recorded: only the first %d are printed", ceiling, ceiling))
			// The ceiling-th receipt: the batch records follow the k
			// acceptances, each listing sequences 1 to k.
			last := pigeon.ReceiptCursor{AuditSeq: uint64(tc.k + (ceiling-1)/tc.k + 1), Seq: uint64((ceiling-1)%tc.k + 1)}
			require.Contains(t, stderr, "the next page is --after "+last.String()+" ")
			require.Contains(t, stderr, "a negative --max reads "+strconv.Itoa(ceiling)+" at most")
			require.NotContains(t, stderr, "--data", "offline already")

			var rest strings.Builder
			next := regexp.MustCompile(`the next page is --after ([0-9]+:[0-9]+)`)
			for pages := 1; code == 3; pages++ {
				require.LessOrEqual(t, pages, total/ceiling+1, "paging ends")
				m := next.FindStringSubmatch(stderr)
				require.NotNil(t, m, stderr)
				var page string
				code, page, stderr = receipts("--max", "-1", "--after", m[1])
				require.Contains(t, []int{0, 3}, code, stderr)
				rest.WriteString(page)
			}
			require.Empty(t, stderr)
			all := first + rest.String()
			require.Equal(t, total, strings.Count(all, "\n"))
			code, whole, stderr := receipts("--max", strconv.Itoa(total))
			require.Equal(t, 0, code, stderr)
			require.Equal(t, whole, all, "every receipt once, in order")
		})
	}
}

// forgedReceiptsDir is a data directory whose audit log, chained as the
// broker chains it (the chain has no key), holds k acceptances of msg_x
// on one subject (sequences 1 to k) and then k delivery batch records
// that each list all of them: k*k receipts of msg_x.
func forgedReceiptsDir(t *testing.T, k int) string {
	t.Helper()
	all := "1-" + strconv.Itoa(k)
	dir, _ := auditDir(t, 2*k, func(r *store.AuditRecord) {
		r.Outcome, r.Code, r.Principal = "allow", "OK", "bob"
		if r.Seq <= uint64(k) {
			r.Type, r.MessageID, r.Seqs = string(pigeon.EventPublishAccepted), "msg_x", strconv.FormatUint(r.Seq, 10)
			return
		}
		r.Type, r.Seqs, r.Count, r.Digest = string(pigeon.EventDeliveryDispatched), all, k, strings.Repeat("ab", 32)
	})
	return dir
}
