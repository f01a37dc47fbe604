package memory

import (
	"context"
	"maps"
	"slices"
	"time"

	"pigeon/store"
)

// group is one consumer group's progress, when it was last written and
// how many writes it has had.
type group struct {
	state   store.GroupState
	written time.Time
	writes  uint64
}

// MarkDone records seq as done for the group (store.GroupState.MarkDone):
// the floor advances over every contiguous done sequence, the others wait
// in Done, and seq's attempts are forgotten. Marking a done sequence again
// (or sequence 0) is a no-op, and writes nothing: it creates no group and
// does not count as a write for PruneGroups.
func (s *Store) MarkDone(ctx context.Context, key store.GroupKey, seq uint64) error {
	if err := s.lockProgress(ctx); err != nil {
		return err
	}
	defer s.progMu.Unlock()
	if g := s.groups[key.Subject][key.Group]; seq == 0 || g != nil && g.state.IsDone(seq) {
		return nil // a no-op writes nothing (store.GroupPruner), as in store/wal
	}
	s.write(key).MarkDone(seq)
	return nil
}

// MarkAttempt records that delivery attempt n of seq began, raising the
// count only (store.ProgressLog.MarkAttempt): under the lock every
// progress write takes, the attempt recorded becomes the larger of it
// and n. It is a no-op (writing nothing, as MarkDone) for a sequence
// that is already done or whose attempt n or a later one is recorded.
func (s *Store) MarkAttempt(ctx context.Context, key store.GroupKey, seq uint64, n int) error {
	if err := s.lockProgress(ctx); err != nil {
		return err
	}
	defer s.progMu.Unlock()
	var cur store.GroupState
	if g := s.groups[key.Subject][key.Group]; g != nil {
		cur = g.state
	}
	if !cur.RaisesAttempt(seq, n) {
		return nil // a no-op writes nothing, as in store/wal
	}
	s.write(key).MarkAttempt(seq, n)
	return nil
}

// LowerAttempt implements store.AttemptLowerer: under the lock every
// progress write takes, attempt to of seq when from is recorded, and
// otherwise nothing written and a *store.AttemptChangedError.
func (s *Store) LowerAttempt(ctx context.Context, key store.GroupKey, seq uint64, from, to int) error {
	if err := s.lockProgress(ctx); err != nil {
		return err
	}
	defer s.progMu.Unlock()
	var cur store.GroupState
	if g := s.groups[key.Subject][key.Group]; g != nil {
		cur = g.state
	}
	if err := cur.AttemptIs(seq, from, to); err != nil {
		return err
	}
	return s.write(key).LowerAttempt(seq, from, to)
}

var _ store.AttemptLowerer = (*Store)(nil)

// lockProgress takes progMu for writing once ctx and the store are found
// live; the caller unlocks it when the error is nil.
func (s *Store) lockProgress(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.progMu.Lock()
	if err := s.checkClosed(); err != nil {
		s.progMu.Unlock()
		return err
	}
	return nil
}

// rlockProgress takes progMu for reading once ctx and the store are found
// live; the caller unlocks it when the error is nil.
func (s *Store) rlockProgress(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.progMu.RLock()
	if err := s.checkClosed(); err != nil {
		s.progMu.RUnlock()
		return err
	}
	return nil
}

// write returns the progress of key, created when first seen, stamped as
// written now; s.progMu must be held for writing.
func (s *Store) write(key store.GroupKey) *store.GroupState {
	gs := s.groups[key.Subject]
	if gs == nil {
		gs = make(map[string]*group)
		s.groups[key.Subject] = gs
	}
	g := gs[key.Group]
	if g == nil {
		g = &group{}
		gs[key.Group] = g
	}
	g.written = s.opts.Now()
	g.writes++
	return &g.state
}

// RaiseFloor implements store.FloorRaiser (store.GroupState.RaiseFloor),
// stamped with Options.Now when it raises the floor.
func (s *Store) RaiseFloor(ctx context.Context, key store.GroupKey, floor uint64) error {
	if err := s.lockProgress(ctx); err != nil {
		return err
	}
	defer s.progMu.Unlock()
	if g := s.groups[key.Subject][key.Group]; floor == 0 || g != nil && floor <= g.state.Floor {
		return nil // a no-op writes nothing
	}
	s.write(key).RaiseFloor(floor)
	return nil
}

var _ store.FloorRaiser = (*Store)(nil)

// LoadGroup returns a deep copy of the group's state; Done and Attempts are
// nil when empty, and a group never seen is the zero GroupState.
func (s *Store) LoadGroup(ctx context.Context, key store.GroupKey) (store.GroupState, error) {
	if err := s.rlockProgress(ctx); err != nil {
		return store.GroupState{}, err
	}
	defer s.progMu.RUnlock()
	g := s.groups[key.Subject][key.Group]
	if g == nil {
		return store.GroupState{}, nil
	}
	return g.state.Clone(), nil
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

// PruneGroups implements store.GroupPruner. Each write is stamped with
// Options.Now. keep is asked with no lock held, and a group written
// since it was listed is kept.
func (s *Store) PruneGroups(ctx context.Context, subject string, t time.Time, keep func(group string) bool) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	type listed struct {
		name   string
		g      *group
		writes uint64
	}
	var old []listed
	s.progMu.RLock()
	if err := s.checkClosed(); err != nil {
		s.progMu.RUnlock()
		return 0, err
	}
	for name, g := range s.groups[subject] {
		if g.written.Before(t) {
			old = append(old, listed{name, g, g.writes})
		}
	}
	s.progMu.RUnlock()
	old = slices.DeleteFunc(old, func(l listed) bool { return keep(l.name) })
	if len(old) == 0 {
		return 0, nil
	}
	s.progMu.Lock()
	defer s.progMu.Unlock()
	if err := s.checkClosed(); err != nil {
		return 0, err
	}
	gs := s.groups[subject]
	n := 0
	for _, l := range old {
		if gs[l.name] == l.g && l.g.writes == l.writes {
			delete(gs, l.name)
			n++
		}
	}
	if len(gs) == 0 {
		delete(s.groups, subject)
	}
	return n, nil
}

// ListGroups implements store.GroupLister.
func (s *Store) ListGroups(ctx context.Context, subject string, max int) (map[string]store.GroupState, error) {
	if err := s.rlockProgress(ctx); err != nil {
		return nil, err
	}
	defer s.progMu.RUnlock()
	return store.CopyGroups(s.groups[subject], max, func(g *group) *store.GroupState { return &g.state }), nil
}

var _ store.GroupLister = (*Store)(nil)

// ListGroupSubjects implements store.GroupSubjectLister.
func (s *Store) ListGroupSubjects(ctx context.Context) ([]string, error) {
	if err := s.rlockProgress(ctx); err != nil {
		return nil, err
	}
	defer s.progMu.RUnlock()
	return slices.Collect(maps.Keys(s.groups)), nil
}

var _ store.GroupSubjectLister = (*Store)(nil)
