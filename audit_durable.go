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
// store the record is queued for the auditor with the append, before any
// reader of the store can see the message, where the store offers that
// (store/memory's AppendAcceptedTo), and otherwise after it.
//
// A delivery is recorded by a reader of the store, after the message is
// there to read, so queued with the append the acceptance precedes every
// record of the message's delivery in the chain. Pages of receipts rely
// on it (ReceiptFinder): a page that read a delivery record before the
// acceptance it lists could not match it, and the pages after that page
// skip it. Queued after the append, the acceptance could follow a
// delivery made in between, and a page read in that moment would miss
// it.

// appendAccepted appends sm and reports whether acc, the audit record of
// its acceptance, is kept or queued with it; when it is not, the caller
// audits acc itself once the message is accepted.
func (e *Engine) appendAccepted(ctx context.Context, sm store.Message, acc store.AuditRecord) (stored store.Message, dup, audited bool, err error) {
	if h := e.afterAppend.Load(); h != nil {
		defer func() {
			if err == nil && !dup {
				(*h)(stored)
			}
		}()
	}
	if aa, ok := e.store.(store.AcceptAppender); ok {
		if _, ok := e.store.(store.AuditChainer); ok {
			stored, dup, err = aa.AppendAccepted(ctx, sm, acc)
			return stored, dup, true, err
		}
	}
	// The memory store itself, not a type that embeds it: a wrapper that
	// embeds it to change Append (a test's store failing appends, an
	// application's instrumentation) would have its Append passed by.
	if ms, ok := e.store.(*memory.Store); ok {
		stored, dup, err = ms.AppendAcceptedTo(ctx, sm, acc, &e.auditor)
		return stored, dup, err == nil && !dup, err
	}
	stored, dup, err = e.store.Append(ctx, sm)
	return stored, dup, false, err
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
	select {
	case a.kick <- struct{}{}:
	default:
	}
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
