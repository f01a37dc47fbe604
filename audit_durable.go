package pigeon

import (
	"context"
	"strconv"
	"unsafe"

	"pigeon/store"
	"pigeon/store/memory"
)

// Acceptance evidence on a durable store.
//
// A store that keeps a message and the audit record of its acceptance in
// one durable write (store.AcceptAppender, as store/wal does) gets the
// publish.accepted record with the message: when Publish answers
// "accepted", the message and its record are both on disk, for the cost
// of the message's write, and the store chains the record into the audit
// log itself (after a crash, before it opens again). Such a store owns
// the chain's head, so the auditor then appends through it
// (store.AuditChainer) instead of chaining records itself. On any other
// store the record's place in the auditor's queue is taken before the
// append: by the store itself, which queues the record under the lock of
// its appends (store/memory's AppendAcceptedTo, and AppendAcceptedBatchTo
// for the messages of a batch, in their order), or else by the engine,
// which reserves the place before it calls Append and fills it with the
// record once Append returned (a store that learns the sequence only
// from its server's answer, as store/jetstream does; a type that embeds
// the memory store to change its Append).
//
// A delivery is recorded by a reader of the store, after the message is
// there to read, so queued after that place: the acceptance precedes
// every record of the message's delivery in the chain. Pages of receipts
// rely on it (ReceiptFinder): a page that read a delivery record before
// the acceptance it lists could not match it, and the pages after that
// page would skip it. The writer writes the queue up to the first place
// still open and nothing past it; a place is dropped when the append
// fails, finds a duplicate or panics, and the records behind it are
// written on. So a record queued while an append is in flight, one a
// caller waits for included, is written once that append returned: a
// store's Append must not wait for the engine's audit writes, and a
// slow append delays them. The order holds within one engine: an engine
// that shares the chain (another node over the same JetStream) records
// what it delivers without knowing of this engine's places. Shutdown
// drops the places still open and reserves none from then on (the
// writer's end, auditor.release): an acceptance whose append returns
// later is queued at the tail, as it would be without a place, and
// nothing Shutdown waits for waits for an append that its context does
// not bound.

// slotOpen and slotDropped mark, in the auditor's results, the place of
// an acceptance reserved before its append: still open (the writer
// writes nothing past it), or given up (skipped).
var slotOpen, slotDropped = new(error), new(error)

// appendAccepted appends sm and reports whether acc, the audit record of
// its acceptance, is kept or queued with it; when it is not, the caller
// audits acc itself once the message is accepted. On the path where the
// engine queues acc in the place it reserved, acc is completed there
// (its sequence, its texts bounded) as the caller would have.
func (e *Engine) appendAccepted(ctx context.Context, sm store.Message, acc *store.AuditRecord) (stored store.Message, dup, audited bool, err error) {
	if h := e.afterAppend.Load(); h != nil {
		defer func() {
			if err == nil && !dup {
				(*h)(stored)
			}
		}()
	}
	if aa, ok := e.store.(store.AcceptAppender); ok {
		if _, ok := e.store.(store.AuditChainer); ok {
			stored, dup, err = aa.AppendAccepted(ctx, sm, *acc)
			return stored, dup, true, err
		}
	}
	// The memory store itself, not a type that embeds it: a wrapper that
	// embeds it to change Append (a test's store failing appends, an
	// application's instrumentation) would have its Append passed by.
	if ms, ok := e.store.(*memory.Store); ok {
		stored, dup, err = ms.AppendAcceptedTo(ctx, sm, *acc, &e.auditor)
		return stored, dup, err == nil && !dup, err
	}
	a := &e.auditor
	t := a.reserve()
	defer func() {
		if t != 0 { // refused, a duplicate, or a panic of the store's
			a.drop(t)
		}
	}()
	stored, dup, err = e.store.Append(ctx, sm)
	if err != nil || dup {
		return stored, dup, false, err
	}
	acc.Seqs = strconv.FormatUint(stored.Seq, 10)
	boundAuditText(acc) // as appendAudit would; an acceptance is never coalesced
	a.fill(t, *acc)
	t = 0
	return stored, false, true, nil
}

// reserve takes the next place in the queue for an acceptance and
// returns its ticket (the count of records queued with it), or 0 once
// places are released (Shutdown).
func (a *auditor) reserve() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.released {
		return 0
	}
	a.pending = append(a.pending, store.AuditRecord{})
	a.results = append(a.results, slotOpen)
	a.queued++
	a.holes++
	a.open++
	return a.queued
}

// fill puts r in the place of ticket t, or queues it at the tail when
// that place was released (or none was reserved: t is 0).
func (a *auditor) fill(t uint64, r store.AuditRecord) {
	a.mu.Lock()
	if i, ok := a.place(t); ok {
		a.pending[i], a.results[i] = r, nil
		a.holes--
		a.open--
		a.cond.Broadcast() // the waiters behind it
	} else {
		a.pending = append(a.pending, r)
		a.results = append(a.results, nil)
		a.queued++
	}
	a.mu.Unlock()
	a.kickWriter()
}

// drop gives up the place of ticket t: nothing is written there, and
// what is queued behind it is written on.
func (a *auditor) drop(t uint64) {
	a.mu.Lock()
	if i, ok := a.place(t); ok {
		a.results[i] = slotDropped
		a.open--
		a.cond.Broadcast()
	}
	a.mu.Unlock()
	a.kickWriter()
}

// place is the index in pending of ticket t's place while it is open. A
// place the writer took is one release dropped: an open one is never
// taken. a.mu is held.
func (a *auditor) place(t uint64) (int, bool) {
	if t <= a.taken {
		return 0, false
	}
	i := int(t - a.taken - 1)
	return i, i < len(a.results) && a.results[i] == slotOpen
}

// release drops every open place and reserves none from then on: at
// Shutdown, so that neither its final write nor a caller waiting for its
// record (a subscription's end) waits for an append still in flight.
func (a *auditor) release() {
	a.mu.Lock()
	a.released = true
	if a.open > 0 {
		for i, res := range a.results {
			if res == slotOpen {
				a.results[i] = slotDropped
			}
		}
		a.open = 0
		a.cond.Broadcast()
	}
	a.mu.Unlock()
}

// kickWriter wakes the background writer.
func (a *auditor) kickWriter() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// QueueAudit queues r for the writer without waiting for its write: r
// is an acceptance, handed over by the memory store under its lock, so it
// is queued and nothing more (the observers hear of it from the caller,
// after the lock; an acceptance is never bounded nor coalesced).
func (a *auditor) QueueAudit(r store.AuditRecord) {
	a.mu.Lock()
	a.pending = append(a.pending, r)
	a.queued++
	a.results = append(a.results, nil)
	a.mu.Unlock()
	a.kickWriter()
}

// QueueAudits is QueueAudit for each of recs, in order, under one lock:
// the acceptances of a batch (store/memory's AppendAcceptedBatchTo).
func (a *auditor) QueueAudits(recs []store.AuditRecord) {
	a.mu.Lock()
	a.pending = append(a.pending, recs...)
	a.queued += uint64(len(recs))
	for range recs {
		a.results = append(a.results, nil)
	}
	a.mu.Unlock()
	a.kickWriter()
}

// write appends one batch of the auditor's records to the store, chained:
// by the store when it chains records itself (store.AuditChainer),
// otherwise here, from the head the auditor keeps. Only the active writer
// calls it.
func (a *auditor) write(batch []store.AuditRecord) error {
	ctx := context.Background() // evidence is kept even when the caller gives up
	if ch, ok := a.st.(store.AuditChainer); ok {
		return ch.ChainAudit(ctx, batch)
	}
	seq, prev := a.seq, a.prev
	// The batch's ids and hashes are strings of one buffer, never
	// written again once each is taken: one allocation for the batch
	// rather than two per record. Its capacity holds them all, so it is
	// never moved.
	text := make([]byte, 0, len(batch)*(len("aud_")+20+64))
	for i := range batch {
		r := &batch[i]
		seq++
		r.Seq, r.Time = seq, r.Time.UTC()
		at := len(text)
		text = strconv.AppendUint(append(text, "aud_"...), seq, 10)
		r.ID = unsafe.String(&text[at], len(text)-at)
		r.PrevHash = prev
		at = len(text)
		text = r.AppendHash(text)
		r.Hash = unsafe.String(&text[at], len(text)-at)
		prev = r.Hash
	}
	err := a.st.AppendAudit(ctx, batch...)
	if err == nil {
		// Under mu: Stats reads the head while a writer (which runs
		// without mu) may be writing the next batch. Only the active
		// writer changes it, so reading it above needs no lock.
		a.mu.Lock()
		a.seq, a.prev = seq, prev
		a.mu.Unlock()
	}
	return err
}
