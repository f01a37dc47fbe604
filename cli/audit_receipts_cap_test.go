package cli

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
)

// `pigeon audit receipts` prints at most --max receipts (default
// pigeon.DefaultMaxReceipts): the receipts of one id number up to its
// acceptances times the delivery records that list them, which a forged
// or busy log makes as many as it likes. Beyond the cap it prints the
// first ones in chain order, says on stderr that it cut them and how to
// get the rest, and exits 3; within it (or with no cap) it prints them all
// and exits 0.
func TestAuditReceiptsCapped(t *testing.T) {
	dir := twelveReceipts(t)
	for _, tc := range []struct {
		args  []string
		code  int
		lines int
	}{
		{nil, 0, 12},
		{[]string{"--max", "0"}, 0, 12},
		{[]string{"--max", "12"}, 0, 12},
		{[]string{"--max", "-1"}, 0, 12},
		{[]string{"--max", "11"}, 3, 11},
		{[]string{"--max", "5"}, 3, 5},
	} {
		args := append(append([]string{"audit", "receipts", "--data", dir}, tc.args...), "msg_x")
		code, stdout, stderr := (*running)(nil).pigeon(t, t.Context(), args...)
		require.Equal(t, tc.code, code, "%v: %s", tc.args, stderr)
		require.Equal(t, tc.lines, strings.Count(stdout, "\n"), tc.args)
		require.Contains(t, stdout, `"auditSeq":4,`, "the first receipts, in chain order")
		if tc.code == 3 {
			require.Contains(t, stderr, "more than "+strconv.Itoa(tc.lines)+" deliveries of msg_x are recorded")
			require.Contains(t, stderr, "raise --max")
			require.Contains(t, stderr, "the next page is --after ")
		} else {
			require.Empty(t, stderr)
		}
	}
}

// twelveReceipts is a data directory whose audit log holds three
// acceptances of msg_x (sequences 1 to 3) and four delivery batches that
// list all three: 12 receipts of msg_x.
func twelveReceipts(t *testing.T) string {
	t.Helper()
	const accepted, batches = 3, 4
	dir, _ := auditDir(t, accepted+batches, func(r *store.AuditRecord) {
		r.Outcome, r.Code, r.Principal = "allow", "OK", "bob"
		if r.Seq <= accepted {
			r.Type, r.MessageID, r.Seqs = string(pigeon.EventPublishAccepted), "msg_x", strconv.FormatUint(r.Seq, 10)
			return
		}
		r.Type, r.Seqs, r.Count, r.Digest = string(pigeon.EventDeliveryDispatched), "1-3", 3, strings.Repeat("ab", 32)
	})
	return dir
}
