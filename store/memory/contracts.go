package memory

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"time"

	"pigeon/store"
)

// PutContract stores a copy of c, replacing a contract with the same ID,
// unless the stored one is revoked and c is not: a revocation is final
// (store.ContractLog), and the stored record stays as it was.
func (s *Store) PutContract(ctx context.Context, c store.ContractRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Body = bytes.Clone(c.Body)
	s.contractMu.Lock()
	defer s.contractMu.Unlock()
	if err := s.checkClosed(); err != nil {
		return err
	}
	if cur, ok := s.contracts[c.ID]; ok && cur.Revoked && !c.Revoked {
		return nil
	}
	s.contracts[c.ID] = c
	return nil
}

// GetContract returns a copy of one contract, or store.ErrNotFound.
func (s *Store) GetContract(ctx context.Context, id string) (store.ContractRecord, error) {
	if err := ctx.Err(); err != nil {
		return store.ContractRecord{}, err
	}
	s.contractMu.RLock()
	defer s.contractMu.RUnlock()
	if err := s.checkClosed(); err != nil {
		return store.ContractRecord{}, err
	}
	c, ok := s.contracts[id]
	if !ok {
		return store.ContractRecord{}, store.ErrNotFound
	}
	c.Body = bytes.Clone(c.Body)
	return c, nil
}

// DeleteExpiredContracts drops the contracts whose ExpiresAt is before t and
// returns how many it dropped. A contract expiring exactly at t stays.
func (s *Store) DeleteExpiredContracts(ctx context.Context, t time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.contractMu.Lock()
	defer s.contractMu.Unlock()
	if err := s.checkClosed(); err != nil {
		return 0, err
	}
	n := 0
	for id, c := range s.contracts {
		if c.ExpiresAt.Before(t) {
			delete(s.contracts, id)
			n++
		}
	}
	return n, nil
}

var _ store.ContractLister = (*Store)(nil)

// ListContracts returns copies of the contracts whose ExpiresAt is after t,
// revoked ones included, ordered by ID.
func (s *Store) ListContracts(ctx context.Context, t time.Time) ([]store.ContractRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.contractMu.RLock()
	defer s.contractMu.RUnlock()
	if err := s.checkClosed(); err != nil {
		return nil, err
	}
	var out []store.ContractRecord
	for _, c := range s.contracts {
		if c.ExpiresAt.After(t) {
			c.Body = bytes.Clone(c.Body)
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b store.ContractRecord) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
