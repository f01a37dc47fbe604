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
	// Ref is the subscription; empty for a pull receive.
	Ref string `json:"ref,omitempty"`
	// AuditSeq is the record's place in the chain.
	AuditSeq uint64 `json:"auditSeq"`
	// Subject and Seq name the message received: the acceptance of the id
	// in force when the delivery was recorded. A client-chosen id is free
	// again once its message is trimmed, so one id can name two messages
	// over time; Seq tells their deliveries apart (0: the acceptance is
	// no longer in the log).
	Subject string `json:"subject,omitempty"`
	Seq     uint64 `json:"seq,omitempty"`
}

// ReceiptFinder answers "which principal received message X, and when"
// from the audit records, read in chain order (a record of a delivery
// always follows the message's publish.accepted record). A delivery batch
// record names its messages by sequence; the publish.accepted record maps
// the id to its subject and sequence. Records written before batch
// records existed name the message id and match directly. The zero value
// is not usable; see NewReceiptFinder. It is not safe for concurrent use.
type ReceiptFinder struct {
	id       string
	subject  string
	seq      uint64
	Receipts []Receipt
}

// NewReceiptFinder looks for the deliveries of message id.
func NewReceiptFinder(id string) *ReceiptFinder { return &ReceiptFinder{id: id} }

// Next reads the next record of the chain.
func (f *ReceiptFinder) Next(r *store.AuditRecord) {
	switch Event(r.Type) {
	case EventPublishAccepted:
		if r.MessageID == f.id {
			f.subject = r.Subject
			f.seq, _ = strconv.ParseUint(r.Seqs, 10, 64)
		}
		return
	case EventDeliveryDispatched, EventDeliveryAcked, EventDeliveryNacked, EventDeliveryExhausted:
	default:
		return
	}
	hit := r.MessageID == f.id
	if !hit && f.seq != 0 && r.Subject == f.subject && r.Count > 0 {
		hit = SeqsContain(r.Seqs, f.seq)
	}
	if hit {
		rc := Receipt{Event: Event(r.Type), Time: r.Time, Principal: r.Principal, ContractID: r.ContractID, Ref: r.Ref, AuditSeq: r.Seq, Subject: r.Subject}
		if r.Subject == f.subject {
			rc.Seq = f.seq
		}
		f.Receipts = append(f.Receipts, rc)
	}
}

// Receipts reads the engine's audit log for the deliveries of message id.
func (e *Engine) Receipts(ctx context.Context, id string) ([]Receipt, error) {
	f := NewReceiptFinder(id)
	for from := uint64(1); ; {
		recs, err := e.store.ReadAudit(ctx, from, 1000)
		if err != nil {
			return nil, storeError(err)
		}
		for i := range recs {
			f.Next(&recs[i])
			from = recs[i].Seq + 1
		}
		if len(recs) < 1000 {
			return f.Receipts, nil
		}
	}
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
