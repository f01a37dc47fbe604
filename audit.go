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

// auditor chains and appends audit records. Appends are serialized so the
// chain order is the append order.
type auditor struct {
	mu     sync.Mutex
	st     store.AuditLog
	seq    uint64
	prev   string
	failed uint64
}

// restore reads the chain head from the store.
func (a *auditor) restore(ctx context.Context, st store.AuditLog) error {
	last, cp, err := st.AuditHead(ctx)
	if err != nil {
		return storeError(err)
	}
	a.st = st
	switch {
	case last.Seq != 0:
		a.seq, a.prev = last.Seq, last.Hash
	case cp.Seq != 0:
		a.seq, a.prev = cp.Seq, cp.Hash
	default:
		a.seq, a.prev = 0, store.Genesis
	}
	return nil
}

// audit appends one record, filling its sequence, id, time and hashes. A
// store failure is logged and counted; it never changes the answer the
// caller already earned.
func (e *Engine) audit(ctx context.Context, r store.AuditRecord) {
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
	err := a.st.AppendAudit(context.Background(), r) // evidence is kept even when the caller gives up
	if err == nil {
		a.seq, a.prev = r.Seq, r.Hash
	} else {
		a.failed++
	}
	a.mu.Unlock()
	if err != nil {
		e.opts.Logger.Error("audit append failed", "type", r.Type, "err", err)
	}
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
