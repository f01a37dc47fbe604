package pigeon

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strconv"

	"pigeon/store"
)

// exhaust ends a message whose attempts ran out: quarantined with
// DELIVERY_EXHAUSTED when the subject says so, dropped otherwise; audited
// either way (delivery.exhausted), then recorded done for the group, and
// its cluster lease, at attempt (the one that ran out), settled. g.mu
// must be held.
//
// Once per message and group, however often the done write fails: the
// quarantine copy and the records are written first, so that a crash
// between them and the done write loses nothing (the message is due
// again, and exhausted again), and the next try writes them no second
// time:
//
//   - on this node, g remembers that they are written (group.exhausted),
//     and the next try only records the message done; g stays in memory
//     meanwhile (group.idle);
//   - on a node that did not write them (this one restarted, g loaded
//     again, or another node of a cluster), the copy's id is the
//     message's in its group (exhaustedQuarantineID), looked up before it
//     is written: one found was written, with its records, by an earlier
//     try, and the message is only recorded done. A lookup that fails
//     writes nothing and fails the try, which comes again.
//
// A crash after the copy and before its records leaves the copy without
// its quarantine.created and delivery.exhausted records; a message that
// is dropped, not quarantined, leaves no copy to find, and its record is
// written again by a node that did not write it. Recording the message
// done first instead would lose it, copy and record unwritten, to a crash
// between the two writes.
func (e *Engine) exhaust(ctx context.Context, g *group, s *subject, sm store.Message, attempt int) error {
	if !g.exhausted[sm.Seq] {
		if err := e.writeExhausted(ctx, g, s, sm); err != nil {
			return err
		}
		if g.exhausted == nil {
			g.exhausted = map[uint64]bool{}
		}
		g.exhausted[sm.Seq] = true
	}
	return e.markDone(ctx, g, sm.Seq, attempt)
}

// writeExhausted writes the quarantine copy (when the subject keeps one)
// and the delivery.exhausted record of sm, whose attempts ran out in g,
// unless the copy is in the store already.
func (e *Engine) writeExhausted(ctx context.Context, g *group, s *subject, sm store.Message) error {
	rec := EventDeliveryExhausted.record(OutcomeDeny, CodeDeliveryExhausted, store.AuditRecord{Subject: s.name, PolicyID: s.policyID, MessageID: sm.ID, Seqs: seqText(sm.Seq), Ref: noPANIn(g.key.Group)})
	if s.policy.Quarantine.OnHandlerFailure {
		dm, err := e.decode(sm)
		if err == nil {
			id := exhaustedQuarantineID(g.key, sm)
			switch _, err := e.store.GetQuarantine(ctx, id); {
			case err == nil:
				return nil // an earlier try's, with its records
			case !errors.Is(err, store.ErrNotFound):
				return storeError(err)
			}
			m := dm.m
			a := &Admission{Message: m, Data: dm.value(), Principal: &Principal{ID: m.Source}, subj: s, Now: e.now()}
			d := &Decision{Outcome: OutcomeQuarantine, Code: CodeDeliveryExhausted, Gate: "delivery", Reason: "delivery attempts exhausted",
				Subject: s.name, SubjectID: s.name, PolicyID: s.policyID, SchemaID: s.schemaID, Principal: m.Source, ContractID: m.ContractID, MessageID: m.ID,
				QuarantineID: id}
			if id, err := e.quarantine(ctx, a, d); err == nil {
				rec.Outcome, rec.Ref = string(OutcomeQuarantine), id
			}
		}
	}
	e.audit(ctx, rec)
	return nil
}

// exhaustedQuarantineID is the id of the quarantine copy of sm, exhausted
// in the group key: "qr_" and 20 base-36 characters, as a quarantine
// id drawn at random (newQuarantineID), taken from a digest of the
// subject, the group, the sequence and the message's id. Every try of
// the exhaustion, on any node, names one copy (store.QuarantineLog
// replaces a record of the same id). A message trimmed and another
// published under its id later is another sequence: another copy.
func exhaustedQuarantineID(key store.GroupKey, sm store.Message) string {
	h := sha256.New()
	for _, p := range [...]string{key.Subject, key.Group, strconv.FormatUint(sm.Seq, 10), sm.ID} {
		h.Write([]byte(strconv.Itoa(len(p)) + ":" + p))
	}
	sum := h.Sum(nil)
	const alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
	b := []byte("qr_01234567890123456789")
	r := binary.BigEndian.Uint64(sum[:8])
	for i := 3; i < len(b); i++ {
		if i == 13 {
			r = binary.BigEndian.Uint64(sum[8:16])
		}
		b[i] = alphabet[r%36]
		r /= 36
	}
	return string(b)
}
