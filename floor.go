package pigeon

import (
	"context"
	"errors"
	"slices"

	"pigeon/store"
)

// A group's floor moves only over contiguous done sequences, so once
// retention trimmed messages a group had not finished (it fell behind, or
// it is new on a subject whose first messages are gone), every later one
// it finished would wait above the floor, in memory and in the store, for
// good. The engine raises the floor past the trimmed messages instead:
// when it loads a group, after each retention pass for the groups in
// memory, and when a redelivery finds its message trimmed.

// raiseFloor marks every sequence of g up to floor done: in the store
// first, when it can (store.FloorRaiser), then in memory, where the
// leases, attempts and redeliveries due of those sequences go too. A
// consumer that settles a lease of one later finds no lease: a no-op. A
// store without FloorRaiser keeps g's older floor, and the next load
// raises it again. It returns the store's error unwrapped. g.mu must be
// held, or g being loaded.
func (e *Engine) raiseFloor(ctx context.Context, g *group, floor uint64) error {
	if floor <= g.prog.Floor {
		return nil
	}
	if fr, ok := e.store.(store.FloorRaiser); ok {
		if err := fr.RaiseFloor(ctx, g.key, floor); err != nil {
			return err
		}
	}
	g.prog.RaiseFloor(floor)
	floor = g.prog.Floor // past the done sequences it reached
	for seq := range g.leases {
		if seq <= floor {
			delete(g.leases, seq)
		}
	}
	for seq := range g.attempts {
		if seq <= floor {
			delete(g.attempts, seq)
		}
	}
	g.retry = slices.DeleteFunc(g.retry, func(seq uint64) bool { return seq <= floor })
	g.next = max(g.next, floor+1)
	return nil
}

// raisePastTrimmed raises g's floor to just below the first message of its
// subject that retention kept. It returns the store's error unwrapped.
// g.mu must be held, or g being loaded.
func (e *Engine) raisePastTrimmed(ctx context.Context, g *group) error {
	first, _, err := e.store.Bounds(ctx, g.key.Subject)
	if err != nil || first == 0 {
		return err
	}
	return e.raiseFloor(ctx, g, first-1)
}

// raiseFloors raises the floor of each group of subject in memory past the
// messages retention trimmed, holding each group meanwhile; a group being
// loaded is raised once loaded. Pull cursors are in memory only while a
// pull runs, and their next load raises them. It returns the store's
// errors unwrapped; a group the store failed keeps its floor until the
// next pass.
func (e *Engine) raiseFloors(ctx context.Context, subject string) error {
	first, _, err := e.store.Bounds(ctx, subject)
	if err != nil || first <= 1 {
		return err
	}
	t := &e.groups
	t.mu.Lock()
	held := make([]*group, 0, len(t.bySubject[subject]))
	for g := range t.bySubject[subject] {
		g.refs++
		held = append(held, g)
	}
	t.mu.Unlock()
	var errs []error
	i := 0
	// Every group held is let go and unlocked even when the store panics
	// (the retention pass and the bound trimmer survive it): a group
	// left locked would hang its consumers, and one left held would stay
	// in memory for good.
	defer func() {
		for ; i < len(held); i++ {
			e.releaseGroup(held[i])
		}
	}()
	for ; i < len(held); i++ {
		g := held[i]
		select {
		case <-g.loaded:
		case <-ctx.Done():
		}
		if isLoaded(g) {
			errs = append(errs, e.raiseFloorLocked(ctx, g, first-1))
		}
		e.releaseGroup(g)
	}
	return errors.Join(errs...)
}

// raiseFloorLocked is raiseFloor under g.mu.
func (e *Engine) raiseFloorLocked(ctx context.Context, g *group, floor uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return e.raiseFloor(ctx, g, floor)
}

// isLoaded reports whether g was loaded from the store without error.
func isLoaded(g *group) bool {
	select {
	case <-g.loaded:
		return g.err == nil
	default:
		return false
	}
}
