package wal

import (
	"context"
	"maps"
	"slices"
	"time"

	"pigeon/store"
)

// encDone encodes MarkDone of seq, written at ms (stampOf).
func encDone(key store.GroupKey, seq uint64, ms int64) []byte {
	e := newEnc(kindDone, len(key.Subject)+len(key.Group)+24)
	e.str(key.Subject)
	e.str(key.Group)
	e.uvarint(seq)
	e.varint(ms)
	return e.finish()
}

// MarkDone implements store.ProgressLog.
func (s *Store) MarkDone(ctx context.Context, key store.GroupKey, seq uint64) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	s.meta.mu.RLock()
	g := s.meta.get(key)
	noop := seq == 0 || g != nil && g.IsDone(seq)
	s.meta.mu.RUnlock()
	if noop {
		return nil
	}
	_, err := s.metaWrite(encDone(key, seq, stampOf(s.opts.Now())))
	return err
}

// MarkDoneBatch implements store.BatchProgress: every sequence in one
// commit.
func (s *Store) MarkDoneBatch(ctx context.Context, key store.GroupKey, seqs []uint64) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	ms := stampOf(s.opts.Now())
	s.meta.mu.RLock()
	g := s.meta.get(key)
	recs := make([][]byte, 0, len(seqs))
	for _, seq := range seqs {
		if seq == 0 || g != nil && g.IsDone(seq) {
			continue
		}
		recs = append(recs, encDone(key, seq, ms))
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
// crash stays recorded; the broker treats its lease as expired. It only
// raises the count: the record is applied, as it commits and on replay,
// under the lock every meta record is applied under, as the larger of
// the attempt recorded and n (metaLog.apply), so a record that commits
// after one of a later attempt leaves that one. One that would raise
// nothing when it is called writes nothing.
func (s *Store) MarkAttempt(ctx context.Context, key store.GroupKey, seq uint64, n int) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	s.meta.mu.RLock()
	var cur store.GroupState
	if g := s.meta.get(key); g != nil {
		cur = g.GroupState
	}
	noop := !cur.RaisesAttempt(seq, n)
	s.meta.mu.RUnlock()
	if noop {
		return nil
	}
	_, err := s.metaWrite(encAttempt(key, seq, n, stampOf(s.opts.Now())))
	return err
}

// encAttempt encodes MarkAttempt of attempt n of seq, written at ms
// (stampOf).
func encAttempt(key store.GroupKey, seq uint64, n int, ms int64) []byte {
	e := newEnc(kindAttempt, len(key.Subject)+len(key.Group)+32)
	e.str(key.Subject)
	e.str(key.Group)
	e.uvarint(seq)
	e.varint(int64(n))
	e.varint(ms)
	return e.finish()
}

// LowerAttempt implements store.AttemptLowerer with one record (kind
// 15) that carries the attempt read and the one written, and is applied
// only if the group holds the attempt read when it is applied: as it
// commits, under the lock every meta record is applied under, and in the
// same order on replay, so that a lowering the store refused is not made
// by a reopen either (as Swap). One that cannot be made now writes
// nothing.
func (s *Store) LowerAttempt(ctx context.Context, key store.GroupKey, seq uint64, from, to int) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	s.meta.mu.RLock()
	err := s.meta.attemptIs(key, seq, int64(from), int64(to))
	s.meta.mu.RUnlock()
	if err != nil {
		return err
	}
	e := newEnc(kindLowerAttempt, len(key.Subject)+len(key.Group)+40)
	e.str(key.Subject)
	e.str(key.Group)
	e.uvarint(seq)
	e.varint(int64(from))
	e.varint(int64(to))
	e.varint(stampOf(s.opts.Now()))
	made, err := s.metaWrite(e.finish())
	if err != nil || made == 1 {
		return err
	}
	// Another write of the attempt was applied between the look above
	// and the record's.
	s.meta.mu.RLock()
	err = s.meta.attemptIs(key, seq, int64(from), int64(to))
	s.meta.mu.RUnlock()
	if err == nil { // written back to from since: not made all the same
		err = &store.AttemptChangedError{Seq: seq, From: from, Found: from}
	}
	return err
}

var _ store.AttemptLowerer = (*Store)(nil)

// RaiseFloor implements store.FloorRaiser with one record, which a
// replay applies as the commit did; a snapshot keeps the state it left.
// Like every progress record, it is a write that a PruneGroups record
// looked before spares.
func (s *Store) RaiseFloor(ctx context.Context, key store.GroupKey, floor uint64) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	s.meta.mu.RLock()
	g := s.meta.get(key)
	noop := floor == 0 || g != nil && floor <= g.Floor
	s.meta.mu.RUnlock()
	if noop {
		return nil
	}
	e := newEnc(kindFloor, len(key.Subject)+len(key.Group)+24)
	e.str(key.Subject)
	e.str(key.Group)
	e.uvarint(floor)
	e.varint(stampOf(s.opts.Now()))
	_, err := s.metaWrite(e.finish())
	return err
}

var _ store.FloorRaiser = (*Store)(nil)

// LoadGroup implements store.ProgressLog.
func (s *Store) LoadGroup(ctx context.Context, key store.GroupKey) (store.GroupState, error) {
	if err := s.enter(ctx); err != nil {
		return store.GroupState{}, err
	}
	defer s.leave()
	s.meta.mu.RLock()
	defer s.meta.mu.RUnlock()
	g := s.meta.get(key)
	if g == nil {
		return store.GroupState{}, nil
	}
	return g.Clone(), nil
}

// prunedPerRecord bounds the group names of one kindGroupsPruned record.
const prunedPerRecord = 1024

// PruneGroups implements store.GroupPruner. It lists the groups of
// subject written before t (the time their last record carries) and the
// meta index applied then, asks keep about each without a lock held, and
// commits records naming the others: applying them, now and on every
// replay, deletes a named group only if no record after that index wrote
// it. It returns once the records are as durable as any other write.
func (s *Store) PruneGroups(ctx context.Context, subject string, t time.Time, keep func(group string) bool) (int, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.leave()
	m := &s.meta
	m.mu.RLock()
	upTo := m.applied
	var old []string
	for name, g := range m.groups[subject] {
		if g.at.Before(t) {
			old = append(old, name)
		}
	}
	m.mu.RUnlock()
	var recs [][]byte
	for len(old) > 0 {
		var names []string
		for len(old) > 0 && len(names) < prunedPerRecord {
			if name := old[0]; !keep(name) {
				names = append(names, name)
			}
			old = old[1:]
		}
		if len(names) > 0 {
			recs = append(recs, encPruned(subject, upTo, names))
		}
	}
	if len(recs) == 0 {
		return 0, nil
	}
	return s.metaWrite(recs...)
}

// encPruned encodes the deletion of the named groups of subject that no
// record after meta index upTo wrote.
func encPruned(subject string, upTo uint64, names []string) []byte {
	e := newEnc(kindGroupsPruned, len(subject)+16+64*len(names))
	e.str(subject)
	e.uvarint(upTo)
	e.uvarint(uint64(len(names)))
	for _, name := range names {
		e.str(name)
	}
	return e.finish()
}

var _ store.GroupPruner = (*Store)(nil)

// ListGroups implements store.GroupLister from the state in memory: the
// progress the meta log and its snapshot hold.
func (s *Store) ListGroups(ctx context.Context, subject string, max int) (map[string]store.GroupState, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	s.meta.mu.RLock()
	defer s.meta.mu.RUnlock()
	return store.CopyGroups(s.meta.groups[subject], max, func(g *group) *store.GroupState { return &g.GroupState }), nil
}

var _ store.GroupLister = (*Store)(nil)

// ListGroupSubjects implements store.GroupSubjectLister from the state in
// memory, as ListGroups.
func (s *Store) ListGroupSubjects(ctx context.Context) ([]string, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	s.meta.mu.RLock()
	defer s.meta.mu.RUnlock()
	return slices.Collect(maps.Keys(s.meta.groups)), nil
}

var _ store.GroupSubjectLister = (*Store)(nil)
