package pigeon_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestReceiptsOldFormOncePerPage: a record of one message that names the
// id alone (written before such records named the sequence) has one
// receipt, whose sequence is worked out from the acceptances of the id
// around it (the one in force, else the next on its subject). Those can
// change between two pages (an acceptance of the id appended after the
// record, once its message was trimmed and the id freed; the acceptance
// in force trimmed by retention), and with them the sequence, so the
// record's receipt moved past the cursor the page before ended on and
// was answered again. A page after a cursor at the record now leaves its
// receipt out, whatever sequence it is given now; each record is
// answered once across the pages.
func TestReceiptsOldFormOncePerPage(t *testing.T) {
	accepted := func(seq uint64, seqs string) pigeon.AuditRecord {
		return pigeon.AuditRecord{Seq: seq, Type: string(pigeon.EventPublishAccepted), Subject: "chat", MessageID: "X", Seqs: seqs}
	}
	oldForm := func(seq uint64) pigeon.AuditRecord { // the id alone
		return pigeon.AuditRecord{Seq: seq, Type: string(pigeon.EventDeliveryNacked), Subject: "chat", MessageID: "X", Principal: "bob"}
	}
	named := func(seq uint64, seqs string) pigeon.AuditRecord { // the id and its sequence
		return pigeon.AuditRecord{Seq: seq, Type: string(pigeon.EventDeliveryAcked), Subject: "chat", MessageID: "X", Seqs: seqs, Principal: "bob"}
	}
	// pages reads the receipts of X a page of one at a time, the first
	// page from before and the rest from after.
	pages := func(before, after []pigeon.AuditRecord) []uint64 {
		find := func(log []pigeon.AuditRecord, c pigeon.ReceiptCursor) *pigeon.ReceiptFinder {
			f := pigeon.NewReceiptFinder("X")
			f.Max, f.After = 1, c
			for _, pass := range []func(*pigeon.AuditRecord){f.Accepted, f.Next} {
				for i := range log {
					pass(&log[i])
				}
			}
			return f
		}
		var got []uint64
		f := find(before, pigeon.ReceiptCursor{})
		for n := 0; ; n++ {
			require.Less(t, n, 10, "paging does not end")
			for _, r := range f.Receipts {
				got = append(got, r.AuditSeq)
			}
			if !f.Truncated {
				return got
			}
			f = find(after, f.Receipts[len(f.Receipts)-1].Cursor())
		}
	}
	for _, tc := range []struct {
		name          string
		before, after []pigeon.AuditRecord
		want          []uint64 // the records answered, by AuditSeq
	}{
		{
			name:   "an acceptance of the id appended after the first page",
			before: []pigeon.AuditRecord{oldForm(1), named(2, "9")},
			after:  []pigeon.AuditRecord{oldForm(1), named(2, "9"), accepted(3, "12")},
			want:   []uint64{1, 2},
		},
		{
			name:   "the acceptance in force trimmed after the first page",
			before: []pigeon.AuditRecord{accepted(1, "3"), oldForm(2), accepted(3, "7"), named(4, "9")},
			after:  []pigeon.AuditRecord{oldForm(2), accepted(3, "7"), named(4, "9")},
			want:   []uint64{2, 4},
		},
		{
			name:   "nothing changed",
			before: []pigeon.AuditRecord{accepted(1, "3"), oldForm(2), oldForm(3), named(4, "9")},
			after:  []pigeon.AuditRecord{accepted(1, "3"), oldForm(2), oldForm(3), named(4, "9")},
			want:   []uint64{2, 3, 4},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, pages(tc.before, tc.after))
		})
	}
}
