package memory

import (
	"context"
	"maps"
	"slices"

	"pigeon/store"
)

// group is one consumer group's progress; see store.GroupState.
type group struct {
	floor    uint64
	done     []uint64 // ascending, every element > floor+1
	attempts map[uint64]int
}

func (g *group) isDone(seq uint64) bool {
	if seq <= g.floor {
		return true
	}
	_, found := slices.BinarySearch(g.done, seq)
	return found
}

// MarkDone records seq as done for the group: the floor advances over every
// contiguous done sequence, the others wait in Done, and seq's attempts are
// forgotten. Marking a done sequence again is a no-op.
func (s *Store) MarkDone(ctx context.Context, key store.GroupKey, seq uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.progMu.Lock()
	defer s.progMu.Unlock()
	if err := s.checkClosed(); err != nil {
		return err
	}
	g := s.groups[key]
	if g == nil {
		g = &group{}
		s.groups[key] = g
	}
	if seq <= g.floor {
		return nil
	}
	delete(g.attempts, seq)
	if seq != g.floor+1 {
		if i, found := slices.BinarySearch(g.done, seq); !found {
			g.done = slices.Insert(g.done, i, seq)
		}
		return nil
	}
	g.floor = seq
	n := 0
	for n < len(g.done) && g.done[n] == g.floor+1 {
		g.floor++
		n++
	}
	if n > 0 {
		g.done = slices.Delete(g.done, 0, n)
	}
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
	g := s.groups[key]
	if g == nil {
		g = &group{}
		s.groups[key] = g
	}
	if g.isDone(seq) {
		return nil
	}
	if g.attempts == nil {
		g.attempts = make(map[uint64]int)
	}
	g.attempts[seq] = n
	return nil
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
	st := store.GroupState{Floor: g.floor}
	if len(g.done) > 0 {
		st.Done = slices.Clone(g.done)
	}
	if len(g.attempts) > 0 {
		st.Attempts = maps.Clone(g.attempts)
	}
	return st, nil
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
