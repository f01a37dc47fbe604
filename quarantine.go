package pigeon

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"time"

	"pigeon/internal/datapath"
	"pigeon/store"
)

// Redacted replaces every forbidden and tokenized field, and every raw card
// number, in a quarantined copy.
const Redacted = "[REDACTED]"

// QuarantineRecord is a refused message kept for review. Its Message has
// every forbidden and tokenized field, and every value that is a raw card
// number (isPAN) whatever its field, replaced by "[REDACTED]".
type QuarantineRecord struct {
	store.QuarantineRecord
	Message *Message `json:"message,omitempty"`
}

func newQuarantineID() string { return "qr_" + NewMessageID()[4:] }

// quarantine keeps a redacted copy of the refused message. A release that
// the gates refuse again keeps none: the message stays in the record it is
// released from, whose id is returned, so that retrying a release cannot
// multiply the copies. The copy's id is d.QuarantineID when d names one
// (an exhausted delivery's, which every try names alike: the store
// replaces a record of the same id), drawn at random otherwise.
func (e *Engine) quarantine(ctx context.Context, a *Admission, d *Decision) (string, error) {
	if a.release != "" {
		return a.release, nil
	}
	id := d.QuarantineID
	if id == "" {
		id = newQuarantineID()
	}
	m := *a.Message
	m.Data = redactData(a.Data, a.subj.redact)
	redactEnvelope(&m)
	rec := store.QuarantineRecord{
		ID: id, Time: a.Now, Subject: d.Subject, Principal: d.Principal, ContractID: d.ContractID,
		PolicyID: d.PolicyID, SchemaID: d.SchemaID, MessageID: noPAN(a.Message.ID), Code: string(d.Code), Gate: d.Gate, Reason: d.Reason,
		Body: m.AppendJSON(nil),
	}
	ar := store.AuditRecord{Gate: rec.Gate, Subject: rec.Subject, Principal: rec.Principal, ContractID: rec.ContractID, PolicyID: rec.PolicyID, SchemaID: rec.SchemaID, MessageID: rec.MessageID, Ref: rec.ID}
	if err := e.store.PutQuarantine(ctx, rec); err != nil {
		// The publish.denied record already says "quarantine": the log
		// says too that no copy was kept, and why.
		err = storeError(err)
		ar.Ref = ""
		e.audit(ctx, EventQuarantineCreated.record(OutcomeDeny, ErrorCode(err), ar))
		return "", err
	}
	e.audit(ctx, EventQuarantineCreated.record(OutcomeQuarantine, Code(rec.Code), ar))
	return rec.ID, nil
}

// redactEnvelope replaces every text field of m a publisher sets that is
// a raw card number by "[REDACTED]", the signature's fields included (on a
// copy of it: m shares it with the admitted message). The envelope gate
// refuses an id that is a card number before any copy is kept; were one
// kept all the same, its id would be dropped (the record names it
// "[REDACTED]"), and a release would publish it under an id the broker
// draws.
func redactEnvelope(m *Message) {
	if isPAN(m.ID) {
		m.ID = ""
	}
	for _, f := range [...]*string{&m.Type, &m.Intent, &m.IdempotencyKey, &m.Classification, &m.Region, &m.ReplyTo, &m.CorrelationID, &m.Reason} {
		if isPAN(*f) {
			*f = Redacted
		}
	}
	if sig := m.Signature; sig != nil && (isPAN(sig.KID) || isPAN(sig.Alg) || isPAN(sig.Sig)) {
		c := *sig
		for _, f := range [...]*string{&c.KID, &c.Alg, &c.Sig} {
			if isPAN(*f) {
				*f = Redacted
			}
		}
		m.Signature = &c
	}
}

// redactData returns data encoded with every value that paths match (as
// the forbidden and tokenized gates match them: member names ignoring
// case, through arrays) replaced by "[REDACTED]", and, as a backstop,
// every string or number anywhere that is a raw card number too, whatever
// its field; a member whose name is a card number is renamed
// "[REDACTED]". Data that did not decode is dropped entirely.
func redactData(data any, paths []datapath.Path) json.RawMessage {
	if data == nil {
		return json.RawMessage("null")
	}
	c := redactCopy(data)
	for i := range paths {
		paths[i].Set(c, Redacted)
	}
	b, err := json.Marshal(c)
	if err != nil {
		return json.RawMessage(`"` + Redacted + `"`)
	}
	return b
}

// redactCopy returns a deep copy of v with every raw card number replaced
// by "[REDACTED]".
func redactCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		c := make(map[string]any, len(x))
		for k, v := range x {
			if isPAN(k) {
				k = Redacted
			}
			c[k] = redactCopy(v)
		}
		return c
	case []any:
		c := make([]any, len(x))
		for i, v := range x {
			c[i] = redactCopy(v)
		}
		return c
	case string:
		if isPAN(x) {
			return Redacted
		}
	case float64:
		if floatIsPAN(x) {
			return Redacted
		}
	case json.Number:
		if isPAN(string(x)) {
			return Redacted
		}
	}
	return v
}

func quarantineView(r store.QuarantineRecord) QuarantineRecord {
	q := QuarantineRecord{QuarantineRecord: r}
	if len(r.Body) > 0 {
		if m, err := DecodeMessage(r.Body); err == nil {
			q.Message = m
		}
	}
	return q
}

// quarantineChunk is how many records a list asks the store for at once.
const quarantineChunk = 256

// QuarantineQuery selects a page of quarantine records, oldest first (by
// Time, then ID).
type QuarantineQuery struct {
	// Since: records kept at or after it.
	Since time.Time
	// After, with Since the Time of the last record of the previous page
	// and After its ID, passes over the records of that instant up to and
	// including it: the next page starts where that one stopped, even
	// when records share an instant.
	After string
	// Max caps the records (0: no cap but the byte budget).
	Max int
}

// Quarantine lists up to max quarantine records (max <= 0: no count
// limit) kept at or after since, oldest first; see QuarantinePage.
func (e *Engine) Quarantine(ctx context.Context, since time.Time, max int) ([]QuarantineRecord, error) {
	return e.QuarantinePage(ctx, QuarantineQuery{Since: since, Max: max})
}

// QuarantinePage lists the quarantine records q selects. Like a replay, a
// page also stops once the copies it holds reach about
// Options.MaxReadBytes, and always holds one record when there is one:
// without it, a page of ten thousand records of a megabyte each would be
// read into memory for one call. The next page is the query with Since
// and After the Time and ID of the page's last record.
func (e *Engine) QuarantinePage(ctx context.Context, q QuarantineQuery) ([]QuarantineRecord, error) {
	max := q.Max
	if max <= 0 {
		max = math.MaxInt
	}
	since, after := q.Since, q.After
	out := []QuarantineRecord{}
	size, ask := 0, quarantineChunk
	for len(out) < max {
		recs, err := e.store.ListQuarantine(ctx, since, ask)
		if err != nil {
			return nil, storeError(err)
		}
		i := 0
		for i < len(recs) && after != "" && recs[i].Time.Equal(since) && recs[i].ID <= after {
			i++
		}
		if i == len(recs) {
			if len(recs) < ask {
				return out, nil
			}
			ask *= 2 // the instant holds more records than were passed over
			continue
		}
		for _, r := range recs[i:] {
			if len(out) == max || (len(out) > 0 && size+len(r.Body) > e.opts.MaxReadBytes) {
				return out, nil
			}
			size += len(r.Body)
			out = append(out, quarantineView(r))
		}
		if len(recs) < ask {
			return out, nil
		}
		last := out[len(out)-1]
		since, after, ask = last.Time, last.ID, quarantineChunk
	}
	return out, nil
}

// QuarantineRecord returns one quarantine record.
func (e *Engine) QuarantineRecord(ctx context.Context, id string) (QuarantineRecord, error) {
	r, err := e.store.GetQuarantine(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return QuarantineRecord{}, NewError(CodeQuarantineNotFound, "unknown quarantine record")
	}
	if err != nil {
		return QuarantineRecord{}, storeError(err)
	}
	return quarantineView(r), nil
}

// releaseLocks serialize the releases of one quarantine record in this
// process.
var releaseLocks idLocks

// ReleaseQuarantine re-publishes a quarantined message under the
// releasing caller's contract, through every gate again (Source becomes the
// releaser), at the depth it was published at (Message.Hops). A record is
// released once, however many releases of it come at once; the release is
// audited whether the re-publish is accepted or refused, and so is a
// release refused because the record is unknown or was released already.
// A release answered duplicate of another message the releaser published
// under the same idempotency key is refused CONFLICT and the record stays
// open: nothing of it was published.
func (e *Engine) ReleaseQuarantine(ctx context.Context, c Caller, id string) (*Result, error) {
	// Shutdown waits for the release's records and the record's mark
	// (inflight.go).
	if !e.ops.enter() {
		return nil, errShutdown()
	}
	defer e.ops.leave()
	// One release of a record at a time, so that the one that finds it
	// open is the only one that publishes it.
	mu := releaseLocks.of(id)
	mu.Lock()
	defer mu.Unlock()
	refused := func(err error) (*Result, error) {
		e.audit(ctx, EventQuarantineReleased.record(OutcomeDeny, ErrorCode(err), store.AuditRecord{Principal: c.Principal.ID, ContractID: c.ContractID, Ref: id}))
		return nil, err
	}
	r, err := e.store.GetQuarantine(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return refused(NewError(CodeQuarantineNotFound, "unknown quarantine record"))
	}
	if err != nil {
		return nil, storeError(err)
	}
	if r.Released {
		return refused(NewError(CodeBadRequest, "quarantine record %s was already released", id))
	}
	m, err := DecodeMessage(r.Body)
	if err != nil {
		return refused(err)
	}
	// At the depth the message was published at (its Hops, which the
	// broker wrote into the copy from its publisher's caller), never less:
	// released at the releaser's, 0, a program's message would start its
	// lineage again, and a loop of programs through a quarantine would go
	// on past their MaxHops, one release at a time.
	c.Hops = max(c.Hops, m.Hops)
	// Into the log through every gate, never as a reply: a quarantined
	// message on a request/reply subject whose correlationId names a
	// request stored since would otherwise go to that requester, past the
	// gates a reply skips (rules, intent, schema, data quality), under the
	// releaser's name.
	res, err := e.admit(ctx, c, m, m.ID != "", r.ID)
	rec := EventQuarantineReleased.record("", CodeOK, store.AuditRecord{Subject: r.Subject, Principal: c.Principal.ID, ContractID: c.ContractID, PolicyID: r.PolicyID, SchemaID: r.SchemaID, MessageID: r.MessageID, Ref: r.ID})
	if err == nil && res.Status == StatusDuplicate && res.Message.ID != m.ID {
		// Another message the releaser published holds the key: nothing of
		// this one was published, so its record stays open.
		err = NewError(CodeConflict, "the releaser published message %s under this message's idempotency key; nothing was published and the record stays open", res.Message.ID)
	}
	if err != nil {
		rec.Outcome, rec.Code = string(OutcomeDeny), string(ErrorCode(err))
		e.audit(ctx, rec)
		return nil, err
	}
	// The message is published: its release goes on the record before the
	// record is marked, so that a store that fails to mark it leaves the
	// evidence of who let the message out all the same.
	rec.Outcome = string(OutcomeAllow)
	e.audit(ctx, rec)
	r.Released, r.ReleasedBy, r.ReleasedAt, r.ReleasedAs = true, c.Principal.ID, e.now(), res.Message.ID
	if err := e.store.PutQuarantine(ctx, r); err != nil {
		return nil, storeError(err)
	}
	return res, nil
}
