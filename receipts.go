package pigeon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"pigeon/store"
)

// Receipt is one delivery of a message that the audit log records: who
// was handed it (or acknowledged, nacked or exhausted it), under which
// contract and subscription, and when.
type Receipt struct {
	Event      Event     `json:"event"`
	Time       time.Time `json:"time"`
	Principal  string    `json:"principal"`
	ContractID string    `json:"contractId"`
	// Ref is the subscription; empty for a pull receive; the reason
	// given for a replay (Event replay.executed); the request's id for a
	// reply (Event reply.delivered).
	Ref string `json:"ref,omitempty"`
	// AuditSeq is the record's place in the chain.
	AuditSeq uint64 `json:"auditSeq"`
	// Subject and Seq name the message received: the sequence the
	// delivery record names (a batch record's seqs listing the sequence of
	// an acceptance of the id; a record of one message, its own seqs). A
	// client-chosen id is free again once its message is trimmed, so one
	// id can name two messages over time; Seq tells their deliveries apart
	// (0: unknown, for a record naming the id alone, written before
	// records of one message named their sequence, whose acceptance is no
	// longer in the log).
	Subject string `json:"subject,omitempty"`
	Seq     uint64 `json:"seq,omitempty"`
}

// ReceiptCursor is a receipt's place in the order receipts are answered
// in: by the record's place in the chain (AuditSeq), then, among the
// receipts of one record (a batch listing several messages of the id),
// by the message's sequence. No two receipts of one answer share one. A
// record naming the id alone (written before such records named the
// sequence) has one receipt, whose sequence is worked out from the
// acceptances around it and can change as the log does: a cursor at that
// record, whatever its sequence, is after that receipt.
type ReceiptCursor struct {
	AuditSeq uint64 `json:"auditSeq"`
	Seq      uint64 `json:"seq"`
}

// Cursor returns the receipt's place, for asking for the receipts after
// it (WithReceiptsAfter, ReceiptFinder.After).
func (r Receipt) Cursor() ReceiptCursor { return ReceiptCursor{AuditSeq: r.AuditSeq, Seq: r.Seq} }

// String writes c as ParseReceiptCursor reads it: the audit record's
// sequence, a colon and the message's sequence, in decimal ("41:7").
func (c ReceiptCursor) String() string {
	return strconv.FormatUint(c.AuditSeq, 10) + ":" + strconv.FormatUint(c.Seq, 10)
}

// ParseReceiptCursor reads a cursor as String writes it, or an audit
// record's sequence alone, which is the cursor after every receipt of
// that record; empty text is the zero cursor, before every receipt. Each
// number is decimal digits alone (no sign, no space), at most 2^64-1;
// anything else is INVALID_ARGUMENT.
func ParseReceiptCursor(s string) (ReceiptCursor, error) {
	if s == "" {
		return ReceiptCursor{}, nil
	}
	auditText, seqText, both := strings.Cut(s, ":")
	audit, ok1 := decimal(auditText)
	seq, ok2 := ^uint64(0), true
	if both {
		seq, ok2 = decimal(seqText)
	}
	if !ok1 || !ok2 {
		return ReceiptCursor{}, NewError(CodeInvalidArgument,
			"a receipt cursor is an audit sequence, or one, a colon and a message sequence, in decimal (%.64q)", s)
	}
	return ReceiptCursor{AuditSeq: audit, Seq: seq}, nil
}

// decimal reads digits alone (no sign, no space) as a uint64.
func decimal(s string) (uint64, bool) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// Before reports whether c comes before d.
func (c ReceiptCursor) Before(d ReceiptCursor) bool {
	return c.AuditSeq < d.AuditSeq || c.AuditSeq == d.AuditSeq && c.Seq < d.Seq
}

// ReceiptFinder answers "which principal received message X, and when"
// from the audit records, read in chain order, in two passes: Accepted
// reads every record once, to learn each acceptance of the id (its
// publish.accepted record maps the id to a subject and sequence), then
// Next reads every record again and collects the deliveries. A delivery
// batch record names its messages by sequence, and it may precede the
// acceptance in the chain: a subscriber reading the store can be handed a
// message, and its batch recorded, in the moment between the message's
// append and the queueing of its acceptance record (on a store that
// neither keeps the record with the message nor queues it with the
// append: see audit_durable.go; and in logs written before store/memory
// did). A single pass of Next alone finds the deliveries recorded after
// the acceptance. Two passes find them within one answer, not across
// pages: a page read in that moment cannot match the record, and the
// pages after it skip it. A record of one message (an acknowledgement by
// id, a nack, an exhaustion) names the message id and its sequence
// (Seqs, no Count), and is that message's, whatever acceptances of the
// id surround it: an answer can be recorded before the acceptance of the
// message it answers, and after the id was freed and taken by a newer
// one. Such a record written before they named
// the sequence names the id alone, and is taken for the acceptance in
// force (inForce). Each record is matched by a search among the
// acceptances of the id on its subject, so the passes take time in
// proportion to the log's length and the receipts found (times a
// logarithm), even over a forged log holding many acceptances of the id
// (the chain has no key). The zero value is not usable; see
// NewReceiptFinder. It is not safe for concurrent use.
//
// The receipts of one id number up to its acceptances times the records
// that list them (a busy id reused many times, or a forged log), so Max
// bounds them: past Max, Next keeps no more, sets Truncated and skips the
// rest of the log, and the passes then take time in proportion to the log
// read, Max and the acceptances of the id. Records whose receipts are all
// at or before After are not matched at all, so a later page costs no
// more than the first.
//
// The log may change between the passes, as Receipts reads a live one:
// records appended meanwhile are read by Next alone, which learns the
// acceptances among them, and retention may trim the log's front. Next
// tells the acceptances it reads from those Accepted read by their place
// in the chain (AuditSeq), not by counting them, so that acceptances
// trimmed meanwhile are not taken for ones appended meanwhile.
type ReceiptFinder struct {
	// Max is the most receipts kept (0 or negative: no cap).
	Max int
	// Truncated reports that a receipt beyond Max was found and left out:
	// Receipts are then the first Max, in chain order.
	Truncated bool
	// After, when not zero, leaves out the receipts at or before it
	// (ReceiptCursor), which neither count toward Max nor are kept: the
	// next page of an answer is the receipts after its last one's Cursor.
	After ReceiptCursor

	id       string
	accepted []acceptance // each acceptance of id, in chain order
	next     int          // Next: the acceptances read so far
	// bySubject indexes accepted by subject, so that a record is matched
	// against the acceptances it can name by search rather than one by
	// one: a forged log with many acceptances of the id and many records
	// to match would otherwise cost their product.
	bySubject map[string]*subjectAcceptances
	hits      []int // scratch: the acceptances a batch record lists
	probes    int   // acceptances looked at and searches made (tests)
	Receipts  []Receipt
}

// acceptance is one message accepted under the id: its subject and
// sequence, and the place of its record in the chain.
type acceptance struct {
	subject  string
	seq      uint64
	auditSeq uint64
}

// subjectAcceptances are the acceptances of the id on one subject.
type subjectAcceptances struct {
	all []int // their places in accepted, ascending (inForce)
	// runs holds the first of those at each sequence (not 0) as runs
	// sorted by sequence, of decreasing sizes, powers of two: adding one
	// merges the runs of equal size (as a binary counter carries), so each
	// is merged about log2(n) times, and a search looks into at most
	// log2(n)+1 runs. A batch record makes one receipt per sequence it
	// lists, so the later acceptances at a sequence (a forged log's) are
	// left out: each record listing it would otherwise look at every one
	// of them, and a log of k of them and m such records would cost k×m
	// for m receipts, which Max does not bound.
	runs [][]seqPlace
	seqs map[uint64]struct{} // the sequences in runs
	max  uint64              // the highest sequence in runs
}

// seqPlace is an acceptance with a sequence: the sequence and its place
// in accepted.
type seqPlace struct {
	seq   uint64
	place int
}

// NewReceiptFinder looks for the deliveries of message id.
func NewReceiptFinder(id string) *ReceiptFinder { return &ReceiptFinder{id: id} }

// ID is the message id f looks for the deliveries of.
func (f *ReceiptFinder) ID() string { return f.id }

// learn adds a to the acceptances of the id, after those read so far.
func (f *ReceiptFinder) learn(a acceptance) {
	place := len(f.accepted)
	f.accepted = append(f.accepted, a)
	if f.bySubject == nil {
		f.bySubject = make(map[string]*subjectAcceptances)
	}
	s := f.bySubject[a.subject]
	if s == nil {
		s = &subjectAcceptances{}
		f.bySubject[a.subject] = s
	}
	s.all = append(s.all, place)
	if a.seq == 0 { // no sequence: no batch record lists it
		return
	}
	if _, dup := s.seqs[a.seq]; dup { // a batch record's receipt of it is that of the first
		return
	}
	if s.seqs == nil {
		s.seqs = make(map[uint64]struct{})
	}
	s.seqs[a.seq] = struct{}{}
	s.max = max(s.max, a.seq)
	run := []seqPlace{{a.seq, place}}
	for len(s.runs) > 0 && len(s.runs[len(s.runs)-1]) <= len(run) {
		run = mergeRuns(s.runs[len(s.runs)-1], run)
		s.runs = s.runs[:len(s.runs)-1]
	}
	s.runs = append(s.runs, run)
}

// mergeRuns merges two runs sorted by sequence, then place.
func mergeRuns(a, b []seqPlace) []seqPlace {
	out := make([]seqPlace, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if b[0].seq < a[0].seq || b[0].seq == a[0].seq && b[0].place < a[0].place {
			out, b = append(out, b[0]), b[1:]
		} else {
			out, a = append(out, a[0]), a[1:]
		}
	}
	return append(append(out, a...), b...)
}

// listed sets f.hits to the places of the acceptances on subject whose
// sequence seqs lists (as SeqsContain reads it), the first at each
// sequence alone, by sequence.
func (f *ReceiptFinder) listed(subject, seqs string) {
	f.hits = f.hits[:0]
	s := f.bySubject[subject]
	if s == nil || len(s.runs) == 0 {
		return
	}
	store.WalkSeqs(seqs, func(lo, hi uint64) bool {
		if lo > s.max {
			return false // past every acceptance
		}
		for _, run := range s.runs {
			f.probes++
			i, _ := slices.BinarySearchFunc(run, lo, func(p seqPlace, lo uint64) int { return cmp.Compare(p.seq, lo) })
			for ; i < len(run) && run[i].seq <= hi; i++ {
				f.probes++
				f.hits = append(f.hits, run[i].place)
			}
		}
		return true
	})
	slices.SortFunc(f.hits, func(a, b int) int {
		return cmp.Or(cmp.Compare(f.accepted[a].seq, f.accepted[b].seq), cmp.Compare(a, b))
	})
}

// Accepted reads the next record of the first pass.
func (f *ReceiptFinder) Accepted(r *store.AuditRecord) {
	if a, ok := f.acceptanceOf(r); ok {
		f.learn(a)
	}
}

// acceptanceOf is the acceptance r records of the id, if it is one.
func (f *ReceiptFinder) acceptanceOf(r *store.AuditRecord) (acceptance, bool) {
	if Event(r.Type) != EventPublishAccepted || r.MessageID != f.id {
		return acceptance{}, false
	}
	seq, _ := strconv.ParseUint(r.Seqs, 10, 64)
	return acceptance{r.Subject, seq, r.Seq}, true
}

// add keeps rc, unless it is at or before After, or Max receipts are
// kept already (Truncated).
func (f *ReceiptFinder) add(rc Receipt) {
	if !f.After.Before(rc.Cursor()) {
		return
	}
	if f.Max > 0 && len(f.Receipts) >= f.Max {
		f.Truncated = true
		return
	}
	f.Receipts = append(f.Receipts, rc)
}

// Next reads the next record of the second pass (or of the only one).
// Once Truncated it does nothing.
func (f *ReceiptFinder) Next(r *store.AuditRecord) {
	if f.Truncated {
		return
	}
	switch Event(r.Type) {
	case EventPublishAccepted:
		if a, ok := f.acceptanceOf(r); ok {
			// The acceptances the first pass read from records that
			// retention trimmed before this one read them: passed.
			// Counted instead, the acceptances recorded between the
			// passes would be taken for them, and never learnt.
			for f.next < len(f.accepted) && f.accepted[f.next].auditSeq < a.auditSeq {
				f.next++
			}
			if f.next == len(f.accepted) { // a single pass, or one recorded since the first: learnt here
				f.learn(a)
			}
			f.next++
		}
		return
	case EventDeliveryDispatched, EventDeliveryAcked, EventDeliveryNacked, EventDeliveryExhausted, EventReplayExecuted:
		if f.passed(r) {
			return
		}
	case EventReplyDelivered:
		// A reply is never in a subject's log: it has no sequence, and
		// an acceptance of the same id on the subject is another message.
		if r.MessageID == f.id {
			f.add(Receipt{Event: EventReplyDelivered, Time: r.Time, Principal: r.Principal, ContractID: r.ContractID, Ref: r.Ref, AuditSeq: r.Seq, Subject: r.Subject})
		}
		return
	default:
		return
	}
	rc := Receipt{Event: Event(r.Type), Time: r.Time, Principal: r.Principal, ContractID: r.ContractID, Ref: r.Ref, AuditSeq: r.Seq, Subject: r.Subject}
	if r.Count > 0 { // a batch record: by sequence
		// Of each acceptance of the id on the subject whose sequence
		// it lists, by sequence: one receipt per sequence listed, even
		// where a forged log accepted the id twice at one sequence (the
		// two receipts would be the same, so listed finds the first).
		f.listed(r.Subject, r.Seqs)
		for _, place := range f.hits {
			if f.Truncated {
				break
			}
			rc.Seq = f.accepted[place].seq
			f.add(rc)
		}
		if len(f.hits) == 0 && r.MessageID == f.id { // of one message, its acceptance trimmed from the log
			rc.Seq, _ = strconv.ParseUint(r.Seqs, 10, 64)
			f.add(rc)
		}
		return
	}
	if r.MessageID == f.id {
		if seq, ok := oneSeq(r.Seqs); ok {
			// A record of one message that names its sequence: of that
			// message, wherever its acceptance is in the log (before or
			// after it, or trimmed from it).
			rc.Seq = seq
		} else {
			// A record of one message by id alone (written before such
			// records named the sequence): of the acceptance in force,
			// or of the next one on its subject when it was recorded
			// just before it. Those can change between two pages (an
			// acceptance of the id appended, a trimmed one), and the
			// sequence with them: its one receipt was answered when a
			// page ended at the record, whatever sequence it had there.
			if f.After.AuditSeq == r.Seq {
				return
			}
			if a, ok := f.inForce(r.Subject); ok {
				rc.Seq = a.seq
			}
		}
		f.add(rc)
	}
}

// passed reports whether every receipt r can make is at or before After:
// they are left out, so they are not worked out either. A batch record
// is matched against every acceptance of the id it lists, so without
// this a page asked after the receipts of a forged log's many such
// records would cost the work of all of them again, which Max bounds for
// the first page alone.
func (f *ReceiptFinder) passed(r *store.AuditRecord) bool {
	return !f.After.Before(ReceiptCursor{AuditSeq: r.Seq, Seq: math.MaxUint64})
}

// oneSeq is the sequence the Seqs of a record of one message (not a
// batch) names: a single sequence in decimal, at least 1.
func oneSeq(seqs string) (uint64, bool) {
	seq, err := strconv.ParseUint(seqs, 10, 64)
	return seq, err == nil && seq != 0
}

// inForce is the acceptance a record of the id alone on subject is of:
// the last one read, or else the next one on the subject.
func (f *ReceiptFinder) inForce(subject string) (acceptance, bool) {
	if f.next > 0 && f.accepted[f.next-1].subject == subject {
		return f.accepted[f.next-1], true
	}
	s := f.bySubject[subject]
	if s == nil {
		return acceptance{}, false
	}
	f.probes++
	i, _ := slices.BinarySearch(s.all, f.next)
	if i == len(s.all) {
		return acceptance{}, false
	}
	return f.accepted[s.all[i]], true
}

// DefaultMaxReceipts is the most receipts Engine.Receipts and
// `pigeon audit receipts` answer unless asked for more (WithMaxReceipts,
// --max): as many as a page of GET /v1/quarantine holds.
const DefaultMaxReceipts = 10000

// ErrReceiptsTruncated is the error Engine.Receipts returns, wrapped and
// together with the first receipts, when the audit log records more
// deliveries of the id than its cap (WithMaxReceipts) allows.
var ErrReceiptsTruncated = errors.New("pigeon: receipts truncated")

// ReceiptsOption is a choice of one call of Engine.Receipts.
type ReceiptsOption func(*receiptsOptions)

type receiptsOptions struct {
	max   int
	after ReceiptCursor
}

// WithMaxReceipts caps the receipts Engine.Receipts answers at n (0: the
// default, DefaultMaxReceipts; negative: no cap).
func WithMaxReceipts(n int) ReceiptsOption { return func(o *receiptsOptions) { o.max = n } }

// WithReceiptsAfter asks Engine.Receipts for the receipts after c alone:
// the next page of an answer cut at its cap is the receipts after the
// Cursor of its last receipt. Pages read the log anew, so a delivery
// recorded meanwhile is in a later page, never in one already answered.
func WithReceiptsAfter(c ReceiptCursor) ReceiptsOption {
	return func(o *receiptsOptions) { o.after = c }
}

// Receipts reads the engine's audit log for the deliveries of message id,
// in two passes (ReceiptFinder). Like Audit, it first writes the records
// still queued (deliveries are recorded without waiting for the write), so
// a delivery made before the call is among its receipts, unless it was
// queued behind the acceptance of a message whose append is still in
// flight on a store that orders acceptances through the engine (see
// audit_durable.go): it is in a later answer, with that acceptance.
//
// It answers at most DefaultMaxReceipts receipts (WithMaxReceipts): the
// receipts of one id number up to its acceptances times the delivery
// records that list them. When the log holds more, it returns the first
// ones, in order (ReceiptCursor), with an error that is
// ErrReceiptsTruncated (errors.Is) and names the cap; ask again with a
// larger one, or for the next page (WithReceiptsAfter), for the rest.
func (e *Engine) Receipts(ctx context.Context, id string, opts ...ReceiptsOption) ([]Receipt, error) {
	var o receiptsOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.max == 0 {
		o.max = DefaultMaxReceipts
	}
	e.flushAudit()
	f := NewReceiptFinder(id)
	f.Max, f.After = o.max, o.after
	for _, pass := range []func(*store.AuditRecord){f.Accepted, f.Next} {
		for from := uint64(1); !f.Truncated; {
			recs, err := e.store.ReadAudit(ctx, from, 1000)
			if err != nil {
				return nil, storeError(err)
			}
			for i := range recs {
				pass(&recs[i])
				from = recs[i].Seq + 1
			}
			// After a record numbered 2^64-1 (a forged log's), from
			// wraps to 0: reading on would read the log again, for
			// ever.
			if len(recs) < 1000 || from == 0 {
				break
			}
		}
	}
	if f.Truncated {
		last := f.Receipts[len(f.Receipts)-1].Cursor()
		past := ""
		if f.After != (ReceiptCursor{}) {
			past = fmt.Sprintf(" after audit record %d, sequence %d", f.After.AuditSeq, f.After.Seq)
		}
		return f.Receipts, fmt.Errorf("%w: more than %d deliveries of %q are recorded%s; these are the first %d (ask for more with WithMaxReceipts, or for the next page with WithReceiptsAfter: after audit record %d, sequence %d)",
			ErrReceiptsTruncated, f.Max, id, past, len(f.Receipts), last.AuditSeq, last.Seq)
	}
	return f.Receipts, nil
}

// SeqsContain reports whether the Seqs of a batch record ("4-9,12")
// lists seq. It reads malformed text as listing nothing past the fault.
func SeqsContain(seqs string, seq uint64) bool {
	found := false
	store.WalkSeqs(seqs, func(lo, hi uint64) bool {
		found = lo <= seq && seq <= hi
		return !found && hi < seq
	})
	return found
}
