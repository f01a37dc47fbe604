package pigeon_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

// pageReceipts reads every receipt of id from e in pages of size, each
// after the last receipt of the one before, and returns them and how
// many pages it took.
func pageReceipts(t *testing.T, e *pigeon.Engine, id string, size int) ([]pigeon.Receipt, int) {
	t.Helper()
	var all []pigeon.Receipt
	var after pigeon.ReceiptCursor
	for pages := 1; ; pages++ {
		require.LessOrEqual(t, pages, 100000, "paging does not end")
		rs, err := e.Receipts(ctx, id, pigeon.WithMaxReceipts(size), pigeon.WithReceiptsAfter(after))
		all = append(all, rs...)
		if err == nil {
			return all, pages
		}
		require.ErrorIs(t, err, pigeon.ErrReceiptsTruncated)
		require.Len(t, rs, size, "a page cut at its cap is full")
		last := rs[len(rs)-1].Cursor()
		require.ErrorContains(t, err, fmt.Sprintf("after audit record %d, sequence %d", last.AuditSeq, last.Seq), "the error names the next page")
		after = last
	}
}

// TestReceiptsInPages: an auditor reads the receipts of an id with more
// deliveries than one answer holds page by page, WithReceiptsAfter the
// last receipt of each, and gets every receipt of the uncapped answer,
// once, in order. On a forged log with 200 acceptances of the id and 100
// records listing them all (20,000 receipts), pages of 10,000 (the
// default cap), 7,001 and 997 agree with the uncapped answer; before
// WithReceiptsAfter the receipts past the cap could not be read at all
// without lifting it.
func TestReceiptsInPages(t *testing.T) {
	o := transporttest.Options()
	o.Store = &forgedReceipts{Store: memory.New(nil), accepted: 200, batches: 100}
	e, err := pigeon.New(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })

	all, err := e.Receipts(ctx, "X", pigeon.WithMaxReceipts(-1))
	require.NoError(t, err)
	require.Len(t, all, 20000)
	for _, size := range []int{pigeon.DefaultMaxReceipts, 7001, 997} {
		got, pages := pageReceipts(t, e, "X", size)
		require.Equal(t, all, got, "pages of %d", size)
		require.Equal(t, (20000+size-1)/size, pages, "pages of %d", size)
	}

	// After the last receipt, nothing.
	rs, err := e.Receipts(ctx, "X", pigeon.WithReceiptsAfter(all[len(all)-1].Cursor()))
	require.NoError(t, err)
	require.Empty(t, rs)
}

// TestReceiptsPagesOfRealDeliveries: the receipts of a message replayed
// five times, read two at a time, are the five replay.executed receipts
// of the uncapped answer, each once.
func TestReceiptsPagesOfRealDeliveries(t *testing.T) {
	f := newFixture(t)
	e := f.e
	res, err := f.connect("orders-token", "notifications.send").Publish(ctx, demo.Notification("k-1"))
	require.NoError(t, err)
	replayer := f.connect("notify-replay-token", "notifications.send")
	for i := range 5 {
		got, err := replayer.Replay(ctx, pigeon.ReplayRequest{Subject: "notifications.send", Reason: fmt.Sprintf("audit %d", i)})
		require.NoError(t, err)
		require.Len(t, got, 1)
	}
	all, err := e.Receipts(ctx, res.Message.ID)
	require.NoError(t, err)
	require.Len(t, all, 5)
	got, pages := pageReceipts(t, e, res.Message.ID, 2)
	require.Equal(t, all, got)
	require.Equal(t, 3, pages)
	for i, r := range got {
		require.Equal(t, pigeon.EventReplayExecuted, r.Event)
		require.Equal(t, fmt.Sprintf("audit %d", i), r.Ref)
		require.Equal(t, res.Message.Sequence, r.Seq)
	}
}
