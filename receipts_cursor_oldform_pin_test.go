package pigeon_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestReceiptCursorAtAnOldFormRecord pins what a cursor at a record of
// one message that names the id alone (written before such records named
// the sequence) means: whatever its sequence, it is after that record's
// one receipt (ReceiptCursor), so a hand-made cursor such as 2:3 leaves
// out the receipt 2:7 although 3 is below 7, while the same cursor at a
// batch record (3:3) keeps that record's receipts after it. This is
// deliberate: the old-form receipt's sequence is worked out from the
// acceptances around it and can rise between two pages (an acceptance of
// the id appended once its message was trimmed), so a page that ended
// on it (2:7 then) must not answer it again as 2:9; a hand-made 2:3 is
// the same cursor as such a page's. The receipts of a record and after
// are asked for with its audit sequence less one alone ("1").
func TestReceiptCursorAtAnOldFormRecord(t *testing.T) {
	log := []pigeon.AuditRecord{
		{Seq: 1, Type: string(pigeon.EventPublishAccepted), Subject: "chat", MessageID: "X", Seqs: "7"},
		{Seq: 2, Type: string(pigeon.EventDeliveryNacked), Subject: "chat", MessageID: "X", Principal: "bob"}, // the id alone
		{Seq: 3, Type: string(pigeon.EventDeliveryDispatched), Subject: "chat", Seqs: "5-9", Count: 5, Principal: "bob"},
	}
	for _, tc := range []struct {
		after string
		want  []string // the receipts answered, by cursor
	}{
		{"", []string{"2:7", "3:7"}},
		{"1", []string{"2:7", "3:7"}}, // after record 1: from record 2 on
		{"2:0", []string{"3:7"}},      // at the old-form record: after its receipt
		{"2:3", []string{"3:7"}},      // below the sequence worked out for it, still after it
		{"2:7", []string{"3:7"}},      // a page that ended on it
		{"2:9", []string{"3:7"}},      // above it
		{"2", []string{"3:7"}},        // after every receipt of record 2
		{"3:3", []string{"3:7"}},      // at a batch record: by sequence
		{"3:7", nil},                  // the last receipt
	} {
		t.Run(tc.after, func(t *testing.T) {
			after, err := pigeon.ParseReceiptCursor(tc.after)
			require.NoError(t, err)
			f := pigeon.NewReceiptFinder("X")
			f.After = after
			for _, pass := range []func(*pigeon.AuditRecord){f.Accepted, f.Next} {
				for i := range log {
					pass(&log[i])
				}
			}
			var got []string
			for _, r := range f.Receipts {
				got = append(got, r.Cursor().String())
			}
			require.Equal(t, tc.want, got)
		})
	}
}
