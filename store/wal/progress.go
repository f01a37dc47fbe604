package wal

import (
	"context"

	"pigeon/store"
)

// MarkDone implements store.ProgressLog.
func (s *Store) MarkDone(ctx context.Context, key store.GroupKey, seq uint64) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	s.meta.mu.RLock()
	g := s.meta.groups[key]
	noop := seq == 0 || g != nil && g.IsDone(seq)
	s.meta.mu.RUnlock()
	if noop {
		return nil
	}
	e := newEnc(kindDone, len(key.Subject)+len(key.Group)+16)
	e.str(key.Subject)
	e.str(key.Group)
	e.uvarint(seq)
	_, err := s.metaWrite(e.finish())
	return err
}

// MarkDoneBatch implements store.BatchProgress: every sequence in one
// commit.
func (s *Store) MarkDoneBatch(ctx context.Context, key store.GroupKey, seqs []uint64) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	s.meta.mu.RLock()
	g := s.meta.groups[key]
	recs := make([][]byte, 0, len(seqs))
	for _, seq := range seqs {
		if seq == 0 || g != nil && g.IsDone(seq) {
			continue
		}
		e := newEnc(kindDone, len(key.Subject)+len(key.Group)+16)
		e.str(key.Subject)
		e.str(key.Group)
		e.uvarint(seq)
		recs = append(recs, e.finish())
	}
	s.meta.mu.RUnlock()
	if len(recs) == 0 {
		return nil
	}
	_, err := s.metaWrite(recs...)
	return err
}

var _ store.BatchProgress = (*Store)(nil)

// MarkAttempt implements store.ProgressLog. An attempt recorded before a
// crash stays recorded; the broker treats its lease as expired.
func (s *Store) MarkAttempt(ctx context.Context, key store.GroupKey, seq uint64, n int) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	s.meta.mu.RLock()
	g := s.meta.groups[key]
	noop := false
	if g != nil {
		a, ok := g.Attempts[seq]
		noop = g.IsDone(seq) || ok && a == n
	}
	s.meta.mu.RUnlock()
	if noop {
		return nil
	}
	e := newEnc(kindAttempt, len(key.Subject)+len(key.Group)+24)
	e.str(key.Subject)
	e.str(key.Group)
	e.uvarint(seq)
	e.varint(int64(n))
	_, err := s.metaWrite(e.finish())
	return err
}

// LoadGroup implements store.ProgressLog.
func (s *Store) LoadGroup(ctx context.Context, key store.GroupKey) (store.GroupState, error) {
	if err := s.enter(ctx); err != nil {
		return store.GroupState{}, err
	}
	defer s.leave()
	s.meta.mu.RLock()
	defer s.meta.mu.RUnlock()
	g := s.meta.groups[key]
	if g == nil {
		return store.GroupState{}, nil
	}
	return g.Clone(), nil
}
