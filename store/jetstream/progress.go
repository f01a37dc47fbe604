package jetstream

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"pigeon/store"
)

func progressKey(k store.GroupKey) string { return token(k.Subject) + "." + token(k.Group) }

// MarkDone implements store.ProgressLog.
func (s *Store) MarkDone(ctx context.Context, key store.GroupKey, seq uint64) error {
	return s.updateGroup(ctx, key, func(g *store.GroupState) { g.MarkDone(seq) })
}

// MarkDoneBatch implements store.BatchProgress in one compare-and-set.
func (s *Store) MarkDoneBatch(ctx context.Context, key store.GroupKey, seqs []uint64) error {
	return s.updateGroup(ctx, key, func(g *store.GroupState) {
		for _, q := range seqs {
			g.MarkDone(q)
		}
	})
}

// MarkAttempt implements store.ProgressLog.
func (s *Store) MarkAttempt(ctx context.Context, key store.GroupKey, seq uint64, n int) error {
	return s.updateGroup(ctx, key, func(g *store.GroupState) { g.MarkAttempt(seq, n) })
}

// LoadGroup implements store.ProgressLog.
func (s *Store) LoadGroup(ctx context.Context, key store.GroupKey) (store.GroupState, error) {
	if err := s.begin(ctx); err != nil {
		return store.GroupState{}, err
	}
	g, _, err := s.loadGroup(ctx, key)
	return g, err
}

func (s *Store) loadGroup(ctx context.Context, key store.GroupKey) (store.GroupState, uint64, error) {
	e, err := direct(ctx, s.opts.Timeout, func() (jetstream.KeyValueEntry, error) { return s.progress.Get(ctx, progressKey(key)) })
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return store.GroupState{}, 0, nil
	}
	if err != nil {
		return store.GroupState{}, 0, s.fail(ctx, err)
	}
	var g store.GroupState
	if err := json.Unmarshal(e.Value(), &g); err != nil {
		return g, 0, &store.CorruptError{File: s.bucketName("progress"), Reason: err.Error()}
	}
	return g, e.Revision(), nil
}

// updateGroup applies fn to the group's state with compare-and-set, so
// that nodes changing one group at once all keep their change.
func (s *Store) updateGroup(ctx context.Context, key store.GroupKey, fn func(*store.GroupState)) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	for {
		g, rev, err := s.loadGroup(ctx, key)
		if err != nil {
			return err
		}
		fn(&g)
		val, err := json.Marshal(&g)
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = s.progress.Create(ctx, progressKey(key), val)
		} else {
			_, err = s.progress.Update(ctx, progressKey(key), val, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		return s.fail(ctx, err)
	}
}
