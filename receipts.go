package pigeon

import (
	"context"
	"strconv"
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

// ReceiptFinder answers "which principal received message X, and when"
// from the audit records, read in chain order, in two passes: Accepted
// reads every record once, to learn each acceptance of the id (its
// publish.accepted record maps the id to a subject and sequence), then
// Next reads every record again and collects the deliveries. A delivery
// batch record names its messages by sequence, and it may precede the
// acceptance in the chain: a subscriber reading the store can be handed a
// message, and its batch recorded, in the moment between the message's
// append and the queueing of its acceptance record. A single pass of Next
// alone finds the deliveries recorded after the acceptance. A record of
// one message (an acknowledgement by id, a nack, an exhaustion) names the
// message id and its sequence (Seqs, no Count), and is that message's,
// whatever acceptances of the id surround it: an answer can be recorded
// before the acceptance of the message it answers, and after the id was
// freed and taken by a newer one. Such a record written before they named
// the sequence names the id alone, and is taken for the acceptance in
// force (inForce). The zero value is not usable; see NewReceiptFinder. It
// is not safe for concurrent use.
type ReceiptFinder struct {
	id       string
	accepted []acceptance // each acceptance of id, in chain order
	next     int          // Next: the acceptances read so far
	Receipts []Receipt
}

// acceptance is one message accepted under the id: its subject and
// sequence.
type acceptance struct {
	subject string
	seq     uint64
}

// NewReceiptFinder looks for the deliveries of message id.
func NewReceiptFinder(id string) *ReceiptFinder { return &ReceiptFinder{id: id} }

// Accepted reads the next record of the first pass.
func (f *ReceiptFinder) Accepted(r *store.AuditRecord) {
	if a, ok := f.acceptanceOf(r); ok {
		f.accepted = append(f.accepted, a)
	}
}

// acceptanceOf is the acceptance r records of the id, if it is one.
func (f *ReceiptFinder) acceptanceOf(r *store.AuditRecord) (acceptance, bool) {
	if Event(r.Type) != EventPublishAccepted || r.MessageID != f.id {
		return acceptance{}, false
	}
	seq, _ := strconv.ParseUint(r.Seqs, 10, 64)
	return acceptance{r.Subject, seq}, true
}

// Next reads the next record of the second pass (or of the only one).
func (f *ReceiptFinder) Next(r *store.AuditRecord) {
	switch Event(r.Type) {
	case EventPublishAccepted:
		if a, ok := f.acceptanceOf(r); ok {
			if f.next == len(f.accepted) { // a single pass: learnt here
				f.accepted = append(f.accepted, a)
			}
			f.next++
		}
		return
	case EventDeliveryDispatched, EventDeliveryAcked, EventDeliveryNacked, EventDeliveryExhausted, EventReplayExecuted:
	case EventReplyDelivered:
		// A reply is never in a subject's log: it has no sequence, and
		// an acceptance of the same id on the subject is another message.
		if r.MessageID == f.id {
			f.Receipts = append(f.Receipts, Receipt{Event: EventReplyDelivered, Time: r.Time, Principal: r.Principal, ContractID: r.ContractID, Ref: r.Ref, AuditSeq: r.Seq, Subject: r.Subject})
		}
		return
	default:
		return
	}
	rc := Receipt{Event: Event(r.Type), Time: r.Time, Principal: r.Principal, ContractID: r.ContractID, Ref: r.Ref, AuditSeq: r.Seq, Subject: r.Subject}
	if r.Count > 0 { // a batch record: by sequence
		hit := false
		for _, a := range f.accepted {
			if a.seq != 0 && a.subject == r.Subject && SeqsContain(r.Seqs, a.seq) {
				rc.Seq, hit = a.seq, true
				f.Receipts = append(f.Receipts, rc)
			}
		}
		if !hit && r.MessageID == f.id { // of one message, its acceptance trimmed from the log
			rc.Seq, _ = strconv.ParseUint(r.Seqs, 10, 64)
			f.Receipts = append(f.Receipts, rc)
		}
		return
	}
	if r.MessageID == f.id {
		if seq, ok := oneSeq(r.Seqs); ok {
			// A record of one message that names its sequence: of that
			// message, wherever its acceptance is in the log (before or
			// after it, or trimmed from it).
			rc.Seq = seq
		} else if a, ok := f.inForce(r.Subject); ok {
			// A record of one message by id alone (written before such
			// records named the sequence): of the acceptance in force,
			// or of the next one on its subject when it was recorded
			// just before it.
			rc.Seq = a.seq
		}
		f.Receipts = append(f.Receipts, rc)
	}
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
	for _, a := range f.accepted[f.next:] {
		if a.subject == subject {
			return a, true
		}
	}
	return acceptance{}, false
}

// Receipts reads the engine's audit log for the deliveries of message id,
// in two passes (ReceiptFinder). Like Audit, it first writes the records
// still queued (deliveries are recorded without waiting for the write), so
// a delivery made before the call is among its receipts.
func (e *Engine) Receipts(ctx context.Context, id string) ([]Receipt, error) {
	e.flushAudit()
	f := NewReceiptFinder(id)
	for _, pass := range []func(*store.AuditRecord){f.Accepted, f.Next} {
		for from := uint64(1); ; {
			recs, err := e.store.ReadAudit(ctx, from, 1000)
			if err != nil {
				return nil, storeError(err)
			}
			for i := range recs {
				pass(&recs[i])
				from = recs[i].Seq + 1
			}
			if len(recs) < 1000 {
				break
			}
		}
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
