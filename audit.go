package pigeon

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"pigeon/store"
)

// AuditRecord is one entry of the hash-chained audit log. Records carry
// ids and codes, never payload values.
type AuditRecord = store.AuditRecord

// auditor chains and appends audit records. Chaining (sequence, hashes) is
// serialized so the chain order is the append order; the store write is
// group-committed: while one caller writes a batch, others queue behind it
// and the next writer takes them all, so concurrent callers share one
// durable write.
type auditor struct {
	mu       sync.Mutex
	cond     *sync.Cond
	st       store.AuditLog
	seq      uint64 // last chained
	prev     string
	pending  []store.AuditRecord
	writing  bool
	written  uint64 // last written (or failed) sequence
	failed   uint64
	batchBuf []store.AuditRecord
}

// restore reads the chain head from the store.
func (a *auditor) restore(ctx context.Context, st store.AuditLog) error {
	last, cp, err := st.AuditHead(ctx)
	if err != nil {
		return storeError(err)
	}
	a.st = st
	a.cond = sync.NewCond(&a.mu)
	switch {
	case last.Seq != 0:
		a.seq, a.prev = last.Seq, last.Hash
	case cp.Seq != 0:
		a.seq, a.prev = cp.Seq, cp.Hash
	default:
		a.seq, a.prev = 0, store.Genesis
	}
	a.written = a.seq
	return nil
}

// audit appends one record, filling its sequence, id, time and hashes, and
// returns once the store has it. A store failure is logged and counted; it
// never changes the answer the caller already earned.
func (e *Engine) audit(ctx context.Context, r store.AuditRecord) { e.appendAudit(r, true) }

// auditAsync chains a record without waiting for the store write when
// another caller is writing already (that writer writes it next); for the
// high-rate events: accepted publishes, whose message is already durable,
// and deliveries. Under a durable store a crash can lose the last
// milliseconds of such records, never a message, and never a link of the
// chain (what is on disk is a prefix of it).
func (e *Engine) auditAsync(r store.AuditRecord) { e.appendAudit(r, false) }

func (e *Engine) appendAudit(r store.AuditRecord, wait bool) {
	if r.Time.IsZero() {
		r.Time = e.now()
	}
	r.Time = r.Time.UTC()
	a := &e.auditor
	a.mu.Lock()
	r.Seq = a.seq + 1
	r.ID = "aud_" + strconv.FormatUint(r.Seq, 10)
	r.PrevHash = a.prev
	r.Hash = r.ComputeHash()
	a.seq, a.prev = r.Seq, r.Hash
	a.pending = append(a.pending, r)
	mine := r.Seq
	for {
		if a.written >= mine {
			a.mu.Unlock()
			return
		}
		if !a.writing {
			break
		}
		if !wait {
			a.mu.Unlock()
			return
		}
		a.cond.Wait()
	}
	// Become the writer: write batches until nothing is pending.
	a.writing = true
	for len(a.pending) > 0 {
		batch := a.pending
		a.pending = a.batchBuf[:0]
		a.mu.Unlock()
		err := a.st.AppendAudit(context.Background(), batch...) // evidence is kept even when the caller gives up
		a.mu.Lock()
		a.written = batch[len(batch)-1].Seq
		if err != nil {
			a.failed += uint64(len(batch))
			e.opts.Logger.Error("audit append failed", "records", len(batch), "err", err)
		}
		a.batchBuf = batch[:0]
		a.cond.Broadcast()
	}
	a.writing = false
	a.mu.Unlock()
}

// flush waits until every chained record has been written.
func (a *auditor) flush() {
	a.mu.Lock()
	for a.writing || len(a.pending) > 0 {
		if !a.writing {
			// Nobody is writing what is pending (cannot happen: the caller
			// that queued it writes it); leave it rather than spin.
			break
		}
		a.cond.Wait()
	}
	a.mu.Unlock()
}

// Audit returns up to max audit records with sequence >= from, in order.
func (e *Engine) Audit(ctx context.Context, from uint64, max int) ([]AuditRecord, error) {
	recs, err := e.store.ReadAudit(ctx, from, max)
	return recs, storeError(err)
}

// VerifyAudit walks the whole audit chain and reports how many records
// verify. Any altered, removed or reordered record fails with
// AUDIT_TAMPERED naming the first bad record.
func (e *Engine) VerifyAudit(ctx context.Context) (uint64, error) {
	return VerifyAuditLog(ctx, e.store)
}

// VerifyAuditLog verifies any store's audit chain from its checkpoint.
func VerifyAuditLog(ctx context.Context, st store.AuditLog) (uint64, error) {
	_, cp, err := st.AuditHead(ctx)
	if err != nil {
		return 0, storeError(err)
	}
	v := store.Verifier{From: cp}
	from := cp.Seq + 1
	for {
		recs, err := st.ReadAudit(ctx, from, 4096)
		if err != nil {
			return v.Count(), storeError(err)
		}
		for i := range recs {
			if err := v.Next(&recs[i]); err != nil {
				var ce *store.ChainError
				if errors.As(err, &ce) {
					return v.Count(), WrapError(CodeAuditTampered, err, "audit record %d: %s", ce.Seq, ce.Reason)
				}
				return v.Count(), WrapError(CodeAuditTampered, err, "%v", err)
			}
		}
		if len(recs) < 4096 {
			return v.Count(), nil
		}
		from = recs[len(recs)-1].Seq + 1
	}
}
