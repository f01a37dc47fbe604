package pigeon_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
	"pigeon/store/wal"
)

// walWindowStore is a WAL store that runs hook once a message and its
// acceptance record are stored (AppendAccepted returned) and before the
// engine is told so: the message can be read, and its delivery recorded,
// in that moment.
type walWindowStore struct {
	*wal.Store
	hook atomic.Pointer[func(store.Message)]
}

func (w *walWindowStore) AppendAccepted(ctx context.Context, m store.Message, acc store.AuditRecord) (store.Message, bool, error) {
	got, dup, err := w.Store.AppendAccepted(ctx, m, acc)
	if err == nil && !dup {
		if h := w.hook.Swap(nil); h != nil {
			(*h)(got)
		}
	}
	return got, dup, err
}

// scanReceiptsOf reads the receipts of id after after, up to max, from
// the audit log of the WAL store in dir as `pigeon audit receipts --data`
// does: offline, from the files, beside the live broker.
func scanReceiptsOf(t *testing.T, dir, id string, max int, after pigeon.ReceiptCursor) ([]pigeon.Receipt, bool) {
	t.Helper()
	f := pigeon.NewReceiptFinder(id)
	f.Max, f.After = max, after
	for _, pass := range []func(*pigeon.AuditRecord){f.Accepted, f.Next} {
		require.NoError(t, wal.ScanAudit(dir, func(r *pigeon.AuditRecord) error { pass(r); return nil }))
	}
	return f.Receipts, f.Truncated
}

// TestReceiptsPagedBesideALiveWAL: on the WAL store, a message is
// replayed (with the one before it: one record listing both) and then
// alone, in the moment after its append returns, and an auditor reads
// its first page of receipts, of one, from the data directory in that
// moment. The next pages, read once the publish is answered, after that
// page's cursor, hold the rest: every receipt of the uncapped answer is
// in one page, once. Before, the acceptance record waited in the store's
// outbox for up to acceptLinger (10 ms) while the replay records were
// chained at once: the first page could not match the record listing
// both (no acceptance yet) and answered the later one, and the pages
// after it left the record listing both out for good. Rounds repeat the
// moment, which on the code before was a race the replays won nearly
// always.
func TestReceiptsPagedBesideALiveWAL(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	inner, err := wal.Open(dir, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, inner.Close(context.Background())) }) // after the engine's Shutdown
	ws := &walWindowStore{Store: inner}
	f := newFixture(t, func(o *pigeon.Options) { o.Store = ws })
	pub := f.connect("orders-token", "notifications.send")
	replayer := f.connect("notify-replay-token", "notifications.send")
	_, err = pub.Publish(ctx, demo.Notification("k-0"))
	require.NoError(t, err)

	for round := range 5 {
		var (
			first     []pigeon.Receipt
			truncated bool
		)
		hook := func(m store.Message) {
			both, err := replayer.Replay(ctx, pigeon.ReplayRequest{Subject: m.Subject, Reason: "both", FromSequence: m.Seq - 1})
			require.NoError(t, err)
			require.Len(t, both, 2)
			alone, err := replayer.Replay(ctx, pigeon.ReplayRequest{Subject: m.Subject, Reason: "alone", FromSequence: m.Seq})
			require.NoError(t, err)
			require.Len(t, alone, 1)
			first, truncated = scanReceiptsOf(t, dir, m.ID, 1, pigeon.ReceiptCursor{})
		}
		ws.hook.Store(&hook)
		res, err := pub.Publish(ctx, demo.Notification(fmt.Sprintf("k-%d", round+1)))
		require.NoError(t, err)
		require.Nil(t, ws.hook.Load(), "the hook ran")
		id := res.Message.ID

		all, more := scanReceiptsOf(t, dir, id, -1, pigeon.ReceiptCursor{})
		require.False(t, more)
		reasons := make([]string, len(all))
		for i, r := range all {
			reasons[i] = r.Ref
		}
		require.Equal(t, []string{"both", "alone"}, reasons, "round %d: the uncapped answer", round)

		require.Len(t, first, 1)
		got := append([]pigeon.Receipt(nil), first...)
		for after, pages := first[0].Cursor(), 1; truncated; pages++ {
			require.LessOrEqual(t, pages, 10, "paging does not end")
			var rs []pigeon.Receipt
			rs, truncated = scanReceiptsOf(t, dir, id, 1, after)
			got = append(got, rs...)
			if len(rs) > 0 {
				after = rs[len(rs)-1].Cursor()
			}
		}
		require.Equal(t, all, got, "round %d: the pages hold every receipt, once, in order", round)
	}
}
