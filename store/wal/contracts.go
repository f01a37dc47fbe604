package wal

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"pigeon/store"
)

// PutContract implements store.ContractLog. A put of c not revoked over a
// stored contract that is revoked leaves the stored one as it was: a
// revocation is final. The rule is kept where the record is applied (when
// it commits and when Open replays it, see metaLog.apply), so a put that
// races a revocation, or is replayed after it, cannot undo it either; the
// look here only spares the log a record that would change nothing.
func (s *Store) PutContract(ctx context.Context, c store.ContractRecord) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	if c.ID == "" {
		return errors.New("wal: put contract: empty id")
	}
	if !c.Revoked {
		s.meta.mu.RLock()
		cur, ok := s.meta.contracts[c.ID]
		s.meta.mu.RUnlock()
		if ok && cur.Revoked {
			return nil
		}
	}
	_, err := s.metaWrite(encodeContract(&c))
	return err
}

// GetContract implements store.ContractLog.
func (s *Store) GetContract(ctx context.Context, id string) (store.ContractRecord, error) {
	if err := s.enter(ctx); err != nil {
		return store.ContractRecord{}, err
	}
	defer s.leave()
	s.meta.mu.RLock()
	c, ok := s.meta.contracts[id]
	s.meta.mu.RUnlock()
	if !ok {
		return store.ContractRecord{}, store.ErrNotFound
	}
	c.Body = cloneBytes(c.Body)
	return c, nil
}

// DeleteExpiredContracts implements store.ContractLog.
func (s *Store) DeleteExpiredContracts(ctx context.Context, t time.Time) (int, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.leave()
	s.meta.mu.RLock()
	any := false
	for _, c := range s.meta.contracts {
		if c.ExpiresAt.Before(t) {
			any = true
			break
		}
	}
	s.meta.mu.RUnlock()
	if !any {
		return 0, nil
	}
	e := newEnc(kindContractGC, 16)
	e.time(t)
	return s.metaWrite(e.finish())
}

var _ store.ContractLister = (*Store)(nil)

// ListContracts implements store.ContractLister: copies of the contracts
// whose ExpiresAt is after t, revoked ones included, ordered by ID. It reads
// the committed metadata, which is what Open rebuilds after a restart.
func (s *Store) ListContracts(ctx context.Context, t time.Time) ([]store.ContractRecord, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	var out []store.ContractRecord
	s.meta.mu.RLock()
	for _, c := range s.meta.contracts {
		if c.ExpiresAt.After(t) {
			c.Body = cloneBytes(c.Body)
			out = append(out, c)
		}
	}
	s.meta.mu.RUnlock()
	slices.SortFunc(out, func(a, b store.ContractRecord) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
