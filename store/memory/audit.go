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
	want := uint64(s.audit.n) + 1
	for i := range recs {
		if recs[i].Seq != want+uint64(i) {
			return fmt.Errorf("memory: audit record seq %d does not continue the log, want %d", recs[i].Seq, want+uint64(i))
		}
	}
	for i := range recs {
		s.audit.push(&recs[i])
	}
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
	if from > uint64(s.audit.n) {
		return nil, nil
	}
	n := s.audit.n - int(from-1)
	if limit > 0 && limit < n {
		n = limit
	}
	out := make([]store.AuditRecord, 0, n)
	for i := int(from - 1); len(out) < n; i++ {
		out = append(out, *s.audit.at(i))
	}
	return out, nil
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
	if s.audit.n == 0 {
		return store.AuditRecord{}, store.Checkpoint{}, nil
	}
	return *s.audit.at(s.audit.n - 1), store.Checkpoint{}, nil
}

// auditChunk is how many records one chunk of the audit log holds: the log
// grows by chunks, never by copying what it already holds.
const auditChunk = 4096

type auditLog struct {
	chunks [][]store.AuditRecord
	n      int
}

func (l *auditLog) push(r *store.AuditRecord) {
	if l.n%auditChunk == 0 {
		l.chunks = append(l.chunks, make([]store.AuditRecord, 0, auditChunk))
	}
	c := &l.chunks[len(l.chunks)-1]
	*c = append(*c, *r)
	l.n++
}

func (l *auditLog) at(i int) *store.AuditRecord { return &l.chunks[i/auditChunk][i%auditChunk] }
