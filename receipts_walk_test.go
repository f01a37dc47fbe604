package pigeon

import (
	"context"
	"math"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/memory"
)

// trimmedBetweenWalks is a store whose audit log, while Receipts walks it
// for the first time, is records 1 to 4, and by the second walk has lost
// records 1 and 2 to retention and gained 5 to 7: a retention trim and
// new deliveries between the two walks of one Receipts call.
type trimmedBetweenWalks struct {
	store.Store
	walks atomic.Int64
}

func (s *trimmedBetweenWalks) ReadAudit(ctx context.Context, from uint64, limit int) ([]store.AuditRecord, error) {
	if from <= 1 {
		s.walks.Add(1)
	}
	accepted := func(seq uint64, msgSeq string) store.AuditRecord {
		return store.AuditRecord{Seq: seq, Type: string(EventPublishAccepted), Subject: "chat.messages", MessageID: "X", Seqs: msgSeq}
	}
	batch := func(seq uint64, msgSeq string) store.AuditRecord {
		return store.AuditRecord{Seq: seq, Type: string(EventDeliveryDispatched), Subject: "chat.messages", Principal: "bob", Seqs: msgSeq, Count: 1}
	}
	log := []store.AuditRecord{
		accepted(1, "1"), batch(2, "1"), // trimmed before the second walk
		accepted(3, "2"), batch(4, "2"),
		accepted(5, "3"), batch(6, "3"), // written between the walks
		{Seq: 7, Type: string(EventDeliveryAcked), Subject: "chat.messages", Principal: "bob", MessageID: "X", Seqs: "3"},
	}
	lo, hi := uint64(1), uint64(4)
	if s.walks.Load() > 1 {
		lo, hi = 3, 7
	}
	var out []store.AuditRecord
	for _, r := range log {
		if r.Seq >= max(from, lo) && r.Seq <= hi && len(out) < limit {
			out = append(out, r)
		}
	}
	return out, nil
}

// TestReceiptsTrimmedBetweenWalks: Receipts walks the audit log
// twice, and retention may trim its front between the walks while
// deliveries are recorded at its end. The second walk then does not meet
// the acceptances the first learnt from the trimmed records: it must
// still tell the acceptances it meets apart from those (by their place in
// the chain, not by counting them), or it takes the acceptance of
// message 3, written between the walks, for one already learnt, never
// learns it, and drops the receipt of its delivery (6:3). That receipt
// comes before the acknowledgement 7:3 it answers, so a reader paging
// past 7:3 never saw it at all. Before, the answer was 4:2 and 7:3.
func TestReceiptsTrimmedBetweenWalks(t *testing.T) {
	st := &trimmedBetweenWalks{Store: memory.New(nil)}
	e, err := New(context.Background(), &Options{Store: st})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })

	rs, err := e.Receipts(context.Background(), "X")
	require.NoError(t, err)
	require.Equal(t, int64(2), st.walks.Load())
	var got []ReceiptCursor
	for _, r := range rs {
		got = append(got, r.Cursor())
	}
	require.Equal(t, []ReceiptCursor{{AuditSeq: 4, Seq: 2}, {AuditSeq: 6, Seq: 3}, {AuditSeq: 7, Seq: 3}}, got)
}

// TestReceiptsAfterCostsNoMoreThanAPage: a page asked after a
// cursor is cut at its cap (Max) as the first is, and costs no more: the
// receipts at or before the cursor are neither kept nor counted toward
// Max, so the finder must not work them out either. On a forged log of
// 2,000 acceptances of X and 2,000 records listing them all (4,000,000
// receipts), the page after the last record's receipts, or a page of ten
// in the middle, costs the finder work in proportion to the log, the
// acceptances and the page, as the first page of ten does (probes counts
// the acceptances looked at and the steps of the searches among them).
// Before, each page matched every record before its cursor against every
// acceptance again: the page after the last cost the product, 4,000,000
// probes and more, a walk slot held for as long, from one request.
func TestReceiptsAfterCostsNoMoreThanAPage(t *testing.T) {
	const k, hits = 2000, 2000
	log := forgedReceiptLog(k, 0, 0, hits)
	last := log[len(log)-1].Seq
	for _, tc := range []struct {
		name     string
		after    ReceiptCursor
		max      int
		receipts int
	}{
		{"the first page", ReceiptCursor{}, 10, 10},
		{"a page in the middle", ReceiptCursor{AuditSeq: last - hits/2, Seq: k / 2}, 10, 10},
		{"the page after the last record", ReceiptCursor{AuditSeq: last, Seq: math.MaxUint64}, 10, 0},
		{"the page after the last receipt", ReceiptCursor{AuditSeq: last, Seq: k}, 10, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewReceiptFinder("X")
			f.Max, f.After = tc.max, tc.after
			for _, pass := range []func(*store.AuditRecord){f.Accepted, f.Next} {
				for i := range log {
					pass(&log[i])
				}
			}
			require.Len(t, f.Receipts, tc.receipts)
			require.LessOrEqual(t, f.probes, 64*(len(log)+k+tc.max))
			if tc.receipts > 0 {
				require.True(t, tc.after.Before(f.Receipts[0].Cursor()))
			}
		})
	}
}
