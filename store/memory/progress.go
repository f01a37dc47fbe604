package memory

import (
	"context"

	"pigeon/store"
)

// MarkDone records seq as done for the group (store.GroupState.MarkDone):
// the floor advances over every contiguous done sequence, the others wait
// in Done, and seq's attempts are forgotten. Marking a done sequence again
// is a no-op.
func (s *Store) MarkDone(ctx context.Context, key store.GroupKey, seq uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.progMu.Lock()
	defer s.progMu.Unlock()
	if err := s.checkClosed(); err != nil {
		return err
	}
	s.group(key).MarkDone(seq)
	return nil
}

// MarkAttempt records that delivery attempt n of seq began. It is a no-op
// for a sequence that is already done.
func (s *Store) MarkAttempt(ctx context.Context, key store.GroupKey, seq uint64, n int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.progMu.Lock()
	defer s.progMu.Unlock()
	if err := s.checkClosed(); err != nil {
		return err
	}
	s.group(key).MarkAttempt(seq, n)
	return nil
}

// group returns the progress of key, created when first seen; s.progMu
// must be held for writing.
func (s *Store) group(key store.GroupKey) *store.GroupState {
	g := s.groups[key]
	if g == nil {
		g = &store.GroupState{}
		s.groups[key] = g
	}
	return g
}

// LoadGroup returns a deep copy of the group's state; Done and Attempts are
// nil when empty, and a group never seen is the zero GroupState.
func (s *Store) LoadGroup(ctx context.Context, key store.GroupKey) (store.GroupState, error) {
	if err := ctx.Err(); err != nil {
		return store.GroupState{}, err
	}
	s.progMu.RLock()
	defer s.progMu.RUnlock()
	if err := s.checkClosed(); err != nil {
		return store.GroupState{}, err
	}
	g := s.groups[key]
	if g == nil {
		return store.GroupState{}, nil
	}
	return g.Clone(), nil
}

// MarkDoneBatch implements store.BatchProgress.
func (s *Store) MarkDoneBatch(ctx context.Context, key store.GroupKey, seqs []uint64) error {
	for _, seq := range seqs {
		if err := s.MarkDone(ctx, key, seq); err != nil {
			return err
		}
	}
	return nil
}

var _ store.BatchProgress = (*Store)(nil)
