package pigeon_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// referenceFinder is ReceiptFinder as plainly as it can be written: every
// record is matched against every acceptance of the id read so far, one
// by one. It costs acceptances times records, which a forged log makes
// large; ReceiptFinder must give the same answers faster.
type referenceFinder struct {
	id       string
	accepted []referenceAcceptance
	next     int
	receipts []pigeon.Receipt
}

type referenceAcceptance struct {
	subject  string
	seq      uint64
	auditSeq uint64
}

func (f *referenceFinder) acceptanceOf(r *pigeon.AuditRecord) (referenceAcceptance, bool) {
	if pigeon.Event(r.Type) != pigeon.EventPublishAccepted || r.MessageID != f.id {
		return referenceAcceptance{}, false
	}
	seq, _ := strconv.ParseUint(r.Seqs, 10, 64)
	return referenceAcceptance{r.Subject, seq, r.Seq}, true
}

func (f *referenceFinder) Accepted(r *pigeon.AuditRecord) {
	if a, ok := f.acceptanceOf(r); ok {
		f.accepted = append(f.accepted, a)
	}
}

func (f *referenceFinder) Next(r *pigeon.AuditRecord) {
	rc := pigeon.Receipt{Event: pigeon.Event(r.Type), Time: r.Time, Principal: r.Principal, ContractID: r.ContractID, Ref: r.Ref, AuditSeq: r.Seq, Subject: r.Subject}
	switch pigeon.Event(r.Type) {
	case pigeon.EventPublishAccepted:
		if a, ok := f.acceptanceOf(r); ok {
			// Past those the first pass read from records trimmed since.
			for f.next < len(f.accepted) && f.accepted[f.next].auditSeq < a.auditSeq {
				f.next++
			}
			if f.next == len(f.accepted) {
				f.accepted = append(f.accepted, a)
			}
			f.next++
		}
		return
	case pigeon.EventReplyDelivered:
		if r.MessageID == f.id {
			f.receipts = append(f.receipts, rc)
		}
		return
	case pigeon.EventDeliveryDispatched, pigeon.EventDeliveryAcked, pigeon.EventDeliveryNacked, pigeon.EventDeliveryExhausted, pigeon.EventReplayExecuted:
	default:
		return
	}
	if r.Count > 0 {
		// One receipt per sequence listed, in order of sequence.
		var seqs []uint64
		for _, a := range f.accepted {
			if a.seq != 0 && a.subject == r.Subject && pigeon.SeqsContain(r.Seqs, a.seq) {
				seqs = append(seqs, a.seq)
			}
		}
		slices.Sort(seqs)
		for _, seq := range slices.Compact(seqs) {
			rc.Seq = seq
			f.receipts = append(f.receipts, rc)
		}
		if len(seqs) == 0 && r.MessageID == f.id {
			rc.Seq, _ = strconv.ParseUint(r.Seqs, 10, 64)
			f.receipts = append(f.receipts, rc)
		}
		return
	}
	if r.MessageID != f.id {
		return
	}
	if seq, err := strconv.ParseUint(r.Seqs, 10, 64); err == nil && seq != 0 {
		rc.Seq = seq
	} else if f.next > 0 && f.accepted[f.next-1].subject == r.Subject {
		rc.Seq = f.accepted[f.next-1].seq
	} else {
		for _, a := range f.accepted[f.next:] {
			if a.subject == r.Subject {
				rc.Seq = a.seq
				break
			}
		}
	}
	f.receipts = append(f.receipts, rc)
}

// randomReceiptLog is a log of up to 60 records drawn from few subjects,
// ids and sequences, so that they meet often: acceptances (some without a
// sequence, or with a malformed one), batch records listing ranges (some
// malformed, some past a fault), records of one message with and without
// their sequence, replies and records of no delivery.
func randomReceiptLog(rng *rand.Rand) []pigeon.AuditRecord {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	seqs := func() string {
		return pick("", "0", "1", "2", "3", "4", "5", "6", "2-3", "1-6", "1,3", "2-4,6", "3-5,5", "4,2", "1-2,x", "5-4", "2,", "18446744073709551615", "1-18446744073709551615")
	}
	events := []pigeon.Event{pigeon.EventPublishAccepted, pigeon.EventPublishAccepted, pigeon.EventDeliveryDispatched, pigeon.EventDeliveryAcked, pigeon.EventDeliveryNacked, pigeon.EventDeliveryExhausted, pigeon.EventReplayExecuted, pigeon.EventReplyDelivered, "contract.created"}
	log := make([]pigeon.AuditRecord, rng.IntN(61))
	base := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	for i := range log {
		r := pigeon.AuditRecord{
			Seq:        uint64(i + 1),
			Type:       string(events[rng.IntN(len(events))]),
			Time:       base.Add(time.Duration(i) * time.Second),
			Subject:    pick("a", "b", "c"),
			MessageID:  pick("X", "X", "Y", ""),
			Principal:  pick("bob", "carol"),
			ContractID: pick("c1", "c2"),
			Ref:        pick("", "sub-1", "req-9"),
			Seqs:       seqs(),
		}
		if r.Type != string(pigeon.EventPublishAccepted) && rng.IntN(2) == 0 {
			r.Count = rng.IntN(4) - 1 // -1 (as no writer does) to 2
		}
		log[i] = r
	}
	return log
}

// checkReceiptFinderMatchesReference reads the log of seed with
// ReceiptFinder and referenceFinder, in one pass and in two (the second
// pass over a log that grew or lost its front meanwhile, as Receipts may
// read a live one), and requires the same receipts of each id.
func checkReceiptFinderMatchesReference(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed>>32))
	log := randomReceiptLog(rng)
	cut := func() (int, int) {
		hi := rng.IntN(len(log) + 1)
		return rng.IntN(hi + 1), hi
	}
	for _, id := range []string{"X", "Y"} {
		what := fmt.Sprintf("seed %d id %s", seed, id)
		checkOnePassMatchesReference(t, log, id, what)
		lo1, hi1 := 0, len(log)
		lo2, hi2 := 0, len(log)
		if rng.IntN(2) == 0 {
			lo1, hi1 = cut()
			lo2, hi2 = cut()
		}
		checkTwoPassesMatchReference(t, log, id, lo1, hi1, lo2, hi2, what)
		checkReceiptPages(t, log, id, 1+rng.IntN(4), what)
	}
}

// checkOnePassMatchesReference requires that ReceiptFinder and
// referenceFinder, reading log in one pass, find the same receipts of id.
func checkOnePassMatchesReference(t *testing.T, log []pigeon.AuditRecord, id, what string) {
	got, want := pigeon.NewReceiptFinder(id), &referenceFinder{id: id}
	for i := range log {
		got.Next(&log[i])
		want.Next(&log[i])
	}
	require.Equal(t, want.receipts, got.Receipts, "%s: one pass", what)
}

// checkTwoPassesMatchReference requires that ReceiptFinder and
// referenceFinder, reading log[lo1:hi1] in the first pass and
// log[lo2:hi2] in the second, find the same receipts of id.
func checkTwoPassesMatchReference(t *testing.T, log []pigeon.AuditRecord, id string, lo1, hi1, lo2, hi2 int, what string) {
	got, want := pigeon.NewReceiptFinder(id), &referenceFinder{id: id}
	for i := lo1; i < hi1; i++ {
		got.Accepted(&log[i])
		want.Accepted(&log[i])
	}
	for i := lo2; i < hi2; i++ {
		got.Next(&log[i])
		want.Next(&log[i])
	}
	require.Equal(t, want.receipts, got.Receipts, "%s: two passes, [%d,%d) then [%d,%d)", what, lo1, hi1, lo2, hi2)
}

// checkReceiptPages requires that the receipts of id in log, read in pages
// of size (each after the last receipt of the one before), are the
// receipts of one uncapped answer, whose cursors ascend strictly.
func checkReceiptPages(t *testing.T, log []pigeon.AuditRecord, id string, size int, what string) {
	read := func(max int, after pigeon.ReceiptCursor) *pigeon.ReceiptFinder {
		f := pigeon.NewReceiptFinder(id)
		f.Max, f.After = max, after
		for _, pass := range []func(*pigeon.AuditRecord){f.Accepted, f.Next} {
			for i := range log {
				pass(&log[i])
			}
		}
		return f
	}
	all := read(0, pigeon.ReceiptCursor{}).Receipts
	for i := 1; i < len(all); i++ {
		prev, cur := all[i-1].Cursor(), all[i].Cursor()
		require.True(t, prev.AuditSeq < cur.AuditSeq || prev.AuditSeq == cur.AuditSeq && prev.Seq < cur.Seq,
			"%s: receipt %d at %+v is not after %+v", what, i, cur, prev)
	}
	var paged []pigeon.Receipt
	var after pigeon.ReceiptCursor
	for pages := 0; ; pages++ {
		require.LessOrEqual(t, pages, len(all), "%s: paging does not end", what)
		f := read(size, after)
		require.LessOrEqual(t, len(f.Receipts), size, what)
		paged = append(paged, f.Receipts...)
		if !f.Truncated {
			break
		}
		require.Len(t, f.Receipts, size, "%s: a truncated page is full", what)
		after = f.Receipts[len(f.Receipts)-1].Cursor()
	}
	require.Equal(t, all, paged, "%s: pages of %d", what, size)
}

// TestReceiptFinderMatchesReference: on random logs ReceiptFinder, which
// searches the acceptances of the id by subject and sequence, answers as
// referenceFinder, which looks at each acceptance in turn.
func TestReceiptFinderMatchesReference(t *testing.T) {
	for seed := range uint64(3000) {
		checkReceiptFinderMatchesReference(t, seed)
	}
}

// TestReceiptFinderMatchesReferenceOnDuplicateSequences: logs that accept
// one id several times at one sequence on a subject (as a forged log can;
// ReceiptFinder indexes the first alone), among batch records listing it
// and records of the id alone whose receipt is of the acceptance in
// force, are answered as referenceFinder answers them: in one pass, in
// two over every pair of windows of the log, and in pages.
func TestReceiptFinderMatchesReferenceOnDuplicateSequences(t *testing.T) {
	accepted := func(subject, id, seq string) pigeon.AuditRecord {
		return pigeon.AuditRecord{Type: string(pigeon.EventPublishAccepted), Subject: subject, MessageID: id, Seqs: seq}
	}
	batch := func(subject, seqs string, count int) pigeon.AuditRecord {
		return pigeon.AuditRecord{Type: string(pigeon.EventDeliveryDispatched), Subject: subject, Seqs: seqs, Count: count, Principal: "bob"}
	}
	alone := func(subject, id string) pigeon.AuditRecord {
		return pigeon.AuditRecord{Type: string(pigeon.EventDeliveryNacked), Subject: subject, MessageID: id, Principal: "carol"}
	}
	for _, tc := range []struct {
		name string
		log  []pigeon.AuditRecord
	}{
		{name: "batch records between acceptances at one sequence", log: []pigeon.AuditRecord{
			accepted("s", "X", "1"), batch("s", "1", 1), accepted("s", "X", "1"), batch("s", "1-2", 2),
			accepted("s", "X", "2"), accepted("s", "X", "1"), batch("s", "1-3", 3), batch("s", "1,2", 2),
		}},
		{name: "records of the id alone around acceptances at one sequence", log: []pigeon.AuditRecord{
			alone("s", "X"), accepted("s", "X", "3"), alone("s", "X"), accepted("s", "X", "3"), alone("s", "X"),
			accepted("t", "X", "3"), alone("s", "X"), accepted("s", "X", "3"), accepted("s", "X", "4"), alone("s", "X"),
			accepted("s", "X", ""), batch("s", "3", 1), batch("t", "2-3", 2), alone("t", "X"),
		}},
		{name: "two ids and two subjects at one sequence", log: []pigeon.AuditRecord{
			accepted("s", "X", "5"), accepted("s", "Y", "5"), accepted("t", "X", "5"), accepted("s", "X", "5"),
			batch("s", "4-6", 3), batch("t", "5", 1), accepted("s", "Y", "5"), accepted("t", "X", "4"),
			batch("t", "4-5", 2), alone("t", "X"), batch("s", "5", 1), alone("s", "Y"),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := tc.log
			for i := range log {
				log[i].Seq = uint64(i + 1)
			}
			for _, id := range []string{"X", "Y"} {
				what := "id " + id
				checkOnePassMatchesReference(t, log, id, what)
				for lo1 := 0; lo1 <= len(log); lo1++ {
					for hi1 := lo1; hi1 <= len(log); hi1++ {
						for lo2 := 0; lo2 <= len(log); lo2++ {
							for hi2 := lo2; hi2 <= len(log); hi2++ {
								checkTwoPassesMatchReference(t, log, id, lo1, hi1, lo2, hi2, what)
							}
						}
					}
				}
				for size := 1; size <= 4; size++ {
					checkReceiptPages(t, log, id, size, what)
				}
			}
		})
	}
}

// FuzzReceiptFinderMatchesReference: TestReceiptFinderMatchesReference for
// the seeds the fuzzer chooses.
func FuzzReceiptFinderMatchesReference(f *testing.F) {
	for _, seed := range []uint64{0, 1, 42, 1 << 40} {
		f.Add(seed)
	}
	f.Fuzz(checkReceiptFinderMatchesReference)
}
