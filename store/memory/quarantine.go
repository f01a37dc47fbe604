package memory

import (
	"bytes"
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"pigeon/store"
)

// PutQuarantine stores a copy of r, replacing a record with the same ID.
func (s *Store) PutQuarantine(ctx context.Context, r store.QuarantineRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.Body = bytes.Clone(r.Body)
	s.quarMu.Lock()
	defer s.quarMu.Unlock()
	if err := s.checkClosed(); err != nil {
		return err
	}
	s.quarantine[r.ID] = r
	return nil
}

// GetQuarantine returns a copy of one record, or store.ErrNotFound.
func (s *Store) GetQuarantine(ctx context.Context, id string) (store.QuarantineRecord, error) {
	if err := ctx.Err(); err != nil {
		return store.QuarantineRecord{}, err
	}
	s.quarMu.RLock()
	defer s.quarMu.RUnlock()
	if err := s.checkClosed(); err != nil {
		return store.QuarantineRecord{}, err
	}
	r, ok := s.quarantine[id]
	if !ok {
		return store.QuarantineRecord{}, store.ErrNotFound
	}
	r.Body = bytes.Clone(r.Body)
	return r, nil
}

// ListQuarantine returns copies of up to max records (no limit when
// max <= 0) with Time >= since, oldest first, records of the same Time in ID
// order. It sorts on every call: quarantine is for review, not a hot path.
func (s *Store) ListQuarantine(ctx context.Context, since time.Time, max int) ([]store.QuarantineRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.quarMu.RLock()
	defer s.quarMu.RUnlock()
	if err := s.checkClosed(); err != nil {
		return nil, err
	}
	var out []store.QuarantineRecord
	for _, r := range s.quarantine {
		if !r.Time.Before(since) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b store.QuarantineRecord) int {
		return cmp.Or(a.Time.Compare(b.Time), strings.Compare(a.ID, b.ID))
	})
	if max > 0 && len(out) > max {
		out = out[:max:max]
	}
	for i := range out {
		out[i].Body = bytes.Clone(out[i].Body)
	}
	return out, nil
}
