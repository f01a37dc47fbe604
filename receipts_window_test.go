package pigeon_test

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
)

// TestReceiptsPagedAcrossTheAcceptanceWindow: a message is replayed (with
// the one before it: one record listing both) and then twice alone (two
// records naming it) in the moment between its append and the return of
// the store's answer, and an auditor reads its first page of receipts,
// of one, in that moment. The next pages, read once the publish is
// answered, after that page's cursor, hold the rest: every receipt of the
// uncapped answer is in one page, once. Before the acceptance record was
// queued with the message, the first page could not match the record
// listing both (no acceptance yet) and answered a later receipt; the
// acceptance then came after all three records, and the next page,
// after that later receipt, left the record listing both out for good.
func TestReceiptsPagedAcrossTheAcceptanceWindow(t *testing.T) {
	f := newFixture(t) // the memory store
	e := f.e
	pub := f.connect("orders-token", "notifications.send")
	replayer := f.connect("notify-replay-token", "notifications.send")
	_, err := pub.Publish(ctx, demo.Notification("k-0"))
	require.NoError(t, err)

	var first []pigeon.Receipt
	var firstErr error
	var ran atomic.Bool
	e.SetAfterAppend(func(m store.Message) {
		if !ran.CompareAndSwap(false, true) {
			return
		}
		both, err := replayer.Replay(ctx, pigeon.ReplayRequest{Subject: m.Subject, Reason: "both"})
		require.NoError(t, err)
		require.Len(t, both, 2)
		for _, reason := range []string{"alone 1", "alone 2"} {
			alone, err := replayer.Replay(ctx, pigeon.ReplayRequest{Subject: m.Subject, Reason: reason, FromSequence: m.Seq})
			require.NoError(t, err)
			require.Len(t, alone, 1)
		}
		first, firstErr = e.Receipts(ctx, m.ID, pigeon.WithMaxReceipts(1))
	})
	res, err := pub.Publish(ctx, demo.Notification("k-1"))
	require.NoError(t, err)
	e.SetAfterAppend(nil)
	require.True(t, ran.Load(), "the hook ran")
	id := res.Message.ID

	all, err := e.Receipts(ctx, id, pigeon.WithMaxReceipts(-1))
	require.NoError(t, err)
	reasons := make([]string, len(all))
	for i, r := range all {
		reasons[i] = r.Ref
	}
	require.Equal(t, []string{"both", "alone 1", "alone 2"}, reasons, "the uncapped answer")

	require.ErrorIs(t, firstErr, pigeon.ErrReceiptsTruncated)
	require.Len(t, first, 1)
	got := append([]pigeon.Receipt(nil), first...)
	rest, pages := pageReceiptsAfter(t, e, id, 1, first[0].Cursor())
	got = append(got, rest...)
	require.Equal(t, all, got, "the pages hold every receipt, once, in order")
	require.Equal(t, 2, pages)
}

// pageReceiptsAfter reads the receipts of id after c in pages of size,
// as pageReceipts does from the start.
func pageReceiptsAfter(t *testing.T, e *pigeon.Engine, id string, size int, after pigeon.ReceiptCursor) ([]pigeon.Receipt, int) {
	t.Helper()
	var all []pigeon.Receipt
	for pages := 1; ; pages++ {
		require.LessOrEqual(t, pages, 1000, "paging does not end")
		rs, err := e.Receipts(ctx, id, pigeon.WithMaxReceipts(size), pigeon.WithReceiptsAfter(after))
		all = append(all, rs...)
		if err == nil {
			return all, pages
		}
		require.ErrorIs(t, err, pigeon.ErrReceiptsTruncated)
		after = rs[len(rs)-1].Cursor()
	}
}
