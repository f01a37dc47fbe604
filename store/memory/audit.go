package memory

import (
	"context"
	"fmt"

	"pigeon/store"
)

// AppendAudit appends recs, which must continue the log: the first has Seq
// one past the last record's (1 on an empty log) and each next one more. A
// batch that breaks the sequence anywhere is refused whole. The hash chain is
// the caller's; it is not checked here.
func (s *Store) AppendAudit(ctx context.Context, recs ...store.AuditRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.auditMu.Lock()
	defer s.auditMu.Unlock()
	if err := s.checkClosed(); err != nil {
		return err
	}
	want := uint64(len(s.audit)) + 1
	for i := range recs {
		if recs[i].Seq != want+uint64(i) {
			return fmt.Errorf("memory: audit record seq %d does not continue the log, want %d", recs[i].Seq, want+uint64(i))
		}
	}
	s.audit = append(s.audit, recs...)
	return nil
}

// ReadAudit returns up to limit records (no limit when limit <= 0) with
// Seq >= from, in order.
func (s *Store) ReadAudit(ctx context.Context, from uint64, limit int) ([]store.AuditRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.auditMu.RLock()
	defer s.auditMu.RUnlock()
	if err := s.checkClosed(); err != nil {
		return nil, err
	}
	// Records start at Seq 1: s.audit[i].Seq == i+1.
	from = max(from, 1)
	if from > uint64(len(s.audit)) {
		return nil, nil
	}
	recs := s.audit[from-1:]
	if limit > 0 && limit < len(recs) {
		recs = recs[:limit]
	}
	return append([]store.AuditRecord(nil), recs...), nil
}

// AuditHead returns the last record (zero when empty) and a zero Checkpoint:
// this store never trims the audit log.
func (s *Store) AuditHead(ctx context.Context) (store.AuditRecord, store.Checkpoint, error) {
	if err := ctx.Err(); err != nil {
		return store.AuditRecord{}, store.Checkpoint{}, err
	}
	s.auditMu.RLock()
	defer s.auditMu.RUnlock()
	if err := s.checkClosed(); err != nil {
		return store.AuditRecord{}, store.Checkpoint{}, err
	}
	if len(s.audit) == 0 {
		return store.AuditRecord{}, store.Checkpoint{}, nil
	}
	return s.audit[len(s.audit)-1], store.Checkpoint{}, nil
}
