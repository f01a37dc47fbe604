package jetstream

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

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

// MarkAttempt implements store.ProgressLog in one compare-and-set of the
// group's entry at the revision read, as MarkDone: the entry is written
// with the larger of the attempt it records and n, so a write that lands
// after another node recorded a later attempt (at a newer revision: the
// compare-and-set fails, and the write reads the entry again) leaves
// that one. One that raises nothing writes nothing, as the bucket's
// leader tells, as LowerAttempt's refusal: a replica behind may still
// hold a count the leader has lowered since (LowerAttempt), or an entry
// it no longer has (pruned).
func (s *Store) MarkAttempt(ctx context.Context, key store.GroupKey, seq uint64, n int) error {
	return s.updateGroupChecked(ctx, key, true, func(g *store.GroupState) bool { return g.MarkAttempt(seq, n) })
}

// LowerAttempt implements store.AttemptLowerer: a compare-and-set of the
// group's entry at the revision read, made only when that entry records
// attempt from of seq, retried as updateGroupIf's (casRetry). Another
// attempt recorded, none, or seq done, as the bucket's leader tells (a
// replica behind may not have the attempt read yet), writes nothing and
// is a *store.AttemptChangedError.
func (s *Store) LowerAttempt(ctx context.Context, key store.GroupKey, seq uint64, from, to int) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	if err := store.CheckLowerAttempt(from, to); err != nil {
		return err
	}
	k := progressKey(key)
	var changed error
	err := casRetry(ctx, s.bucketName("progress"), k, func(leader bool) (bool, error) {
		g, rev, _, err := s.loadGroupFrom(ctx, key, leader)
		if err != nil {
			return false, err
		}
		if changed = g.LowerAttempt(seq, from, to); changed != nil {
			return leader, nil
		}
		val, err := json.Marshal(&g)
		if err != nil {
			return false, err
		}
		// An entry that records an attempt is there: rev is its own.
		_, err = s.progress.Update(ctx, k, val, rev)
		done, err := casDone(err)
		return done, s.fail(ctx, err)
	})
	if err != nil {
		return err
	}
	return changed
}

var _ store.AttemptLowerer = (*Store)(nil)

// RaiseFloor implements store.FloorRaiser in one compare-and-set, as
// MarkDone. A raise to the group's floor or below writes nothing.
func (s *Store) RaiseFloor(ctx context.Context, key store.GroupKey, floor uint64) error {
	if floor == 0 {
		return s.begin(ctx)
	}
	return s.updateGroupIf(ctx, key, func(g *store.GroupState) bool {
		if floor <= g.Floor {
			return false
		}
		g.RaiseFloor(floor)
		return true
	})
}

var _ store.FloorRaiser = (*Store)(nil)

// LoadGroup implements store.ProgressLog.
func (s *Store) LoadGroup(ctx context.Context, key store.GroupKey) (store.GroupState, error) {
	if err := s.begin(ctx); err != nil {
		return store.GroupState{}, err
	}
	g, _, err := s.loadGroup(ctx, key)
	return g, err
}

func (s *Store) loadGroup(ctx context.Context, key store.GroupKey) (store.GroupState, uint64, error) {
	g, rev, _, err := s.loadGroupFrom(ctx, key, false)
	return g, rev, err
}

// loadGroupFrom reads the group's state and its entry's revision (zero
// when there is none): with a direct get, or from the progress bucket's
// leader. marker is set when the leader holds a delete or purge marker of
// the key, at rev: a write then updates it, a create would be refused.
func (s *Store) loadGroupFrom(ctx context.Context, key store.GroupKey, leader bool) (g store.GroupState, rev uint64, marker bool, err error) {
	var val []byte
	if leader {
		m, err := leaderLastOp(ctx, s.nc, s.bucketName("progress"), progressKey(key))
		if err != nil {
			return g, 0, false, s.fail(ctx, err)
		}
		if m == nil {
			return g, 0, false, nil
		}
		if isMarker(m) {
			return g, m.Sequence, true, nil
		}
		val, rev = m.Data, m.Sequence
	} else {
		e, err := direct(ctx, s.opts.Timeout, func() (jetstream.KeyValueEntry, error) { return s.progress.Get(ctx, progressKey(key)) })
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return g, 0, false, nil
		}
		if err != nil {
			return g, 0, false, s.fail(ctx, err)
		}
		val, rev = e.Value(), e.Revision()
	}
	if err := json.Unmarshal(val, &g); err != nil {
		return g, 0, false, &store.CorruptError{File: s.bucketName("progress"), Reason: err.Error()}
	}
	return g, rev, false, nil
}

// updateGroup applies fn to the group's state with compare-and-set, so
// that nodes changing one group at once all keep their change.
func (s *Store) updateGroup(ctx context.Context, key store.GroupKey, fn func(*store.GroupState)) error {
	return s.updateGroupIf(ctx, key, func(g *store.GroupState) bool { fn(g); return true })
}

// updateGroupIf is updateGroup, but writes nothing when fn reports that
// it changed nothing. A write that finds the state changed since it read
// it reads it again from the bucket's leader, pausing longer each time
// (casRetry); one that ctx ends meanwhile fails with a *ContendedError.
func (s *Store) updateGroupIf(ctx context.Context, key store.GroupKey, fn func(*store.GroupState) bool) error {
	return s.updateGroupChecked(ctx, key, false, fn)
}

// updateGroupChecked is updateGroupIf; with leaderNoop, fn's report that
// it changed nothing is taken only from the state the bucket's leader
// holds (a replica behind may hold what the leader has changed since).
func (s *Store) updateGroupChecked(ctx context.Context, key store.GroupKey, leaderNoop bool, fn func(*store.GroupState) bool) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	k := progressKey(key)
	return casRetry(ctx, s.bucketName("progress"), k, func(leader bool) (bool, error) {
		g, rev, marker, err := s.loadGroupFrom(ctx, key, leader)
		if err != nil {
			return false, err
		}
		if !fn(&g) {
			return leader || !leaderNoop, nil
		}
		val, err := json.Marshal(&g)
		if err != nil {
			return false, err
		}
		if rev == 0 && !marker {
			_, err = s.progress.Create(ctx, k, val)
		} else {
			_, err = s.progress.Update(ctx, k, val, rev)
		}
		done, err := casDone(err)
		return done, s.fail(ctx, err)
	})
}

// PruneGroups implements store.GroupPruner. A group's time is the
// JetStream timestamp of its entry in the progress bucket (the server's
// clock), so entries written before PruneGroups existed have one too. A
// group is removed by purging its key's subject up to its entry's
// revision: an entry another node wrote since stays, and so does the
// group (the bucket keeps one revision, so nothing of it is purged and
// it is not counted). No delete marker is left behind.
func (s *Store) PruneGroups(ctx context.Context, subject string, t time.Time, keep func(group string) bool) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	prefix := token(subject) + "."
	w, err := s.progress.WatchFiltered(ctx, []string{prefix + "*"}, jetstream.IgnoreDeletes(), jetstream.MetaOnly())
	if err != nil {
		return 0, s.fail(ctx, err)
	}
	type entry struct {
		group string
		rev   uint64
	}
	var old []entry
	err = func() error {
		defer w.Stop()
		for {
			select {
			case e := <-w.Updates():
				if e == nil {
					return nil
				}
				name, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(strings.TrimPrefix(e.Key(), prefix), "k"))
				if err == nil && e.Created().Before(t) {
					old = append(old, entry{string(name), e.Revision()})
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, o := range old {
		if keep(o.group) {
			continue
		}
		purged, err := s.purgeUpTo(ctx, s.bucketName("progress"), progressKey(store.GroupKey{Subject: subject, Group: o.group}), o.rev)
		if err != nil {
			return n, err
		}
		n += min(int(purged), 1)
	}
	return n, nil
}

var _ store.GroupPruner = (*Store)(nil)

// ListGroups implements store.GroupLister: one watch of the subject's
// keys in the progress bucket, which delivers their values too (a lease's
// key has a token more, so the filter leaves it out), stopped after max.
func (s *Store) ListGroups(ctx context.Context, subject string, max int) (map[string]store.GroupState, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	prefix := token(subject) + "."
	w, err := s.progress.WatchFiltered(ctx, []string{prefix + "*"}, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	defer w.Stop()
	out := map[string]store.GroupState{}
	for max <= 0 || len(out) < max {
		select {
		case e := <-w.Updates():
			if e == nil {
				return out, nil
			}
			name, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(strings.TrimPrefix(e.Key(), prefix), "k"))
			if err != nil {
				continue
			}
			var g store.GroupState
			if err := json.Unmarshal(e.Value(), &g); err != nil {
				return nil, &store.CorruptError{File: s.bucketName("progress"), Reason: err.Error()}
			}
			out[string(name)] = g
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, nil
}

var _ store.GroupLister = (*Store)(nil)

// ListGroupSubjects implements store.GroupSubjectLister: one watch of
// the keys of the progress bucket, without their values (a lease's key
// has a token more, so the filter leaves it out). It reads every group's
// key, so it costs as much as listing every group's progress.
func (s *Store) ListGroupSubjects(ctx context.Context) ([]string, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	w, err := s.progress.WatchFiltered(ctx, []string{"*.*"}, jetstream.IgnoreDeletes(), jetstream.MetaOnly())
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	defer w.Stop()
	seen := map[string]bool{}
	var out []string
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				return out, nil
			}
			tok, _, _ := strings.Cut(e.Key(), ".")
			if seen[tok] {
				continue
			}
			seen[tok] = true
			name, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tok, "k"))
			if err != nil {
				continue
			}
			out = append(out, string(name))
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

var _ store.GroupSubjectLister = (*Store)(nil)

// purgeUpTo removes the revisions of key in bucket up to rev and returns
// how many there were. The purge is one request to the bucket's stream,
// so a revision written after rev is never removed.
func (s *Store) purgeUpTo(ctx context.Context, bucket, key string, rev uint64) (uint64, error) {
	req, err := json.Marshal(struct {
		Filter string `json:"filter"`
		Seq    uint64 `json:"seq"`
	}{"$KV." + bucket + "." + key, rev + 1})
	if err != nil {
		return 0, err
	}
	rctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	msg, err := s.nc.RequestWithContext(rctx, jetstream.DefaultAPIPrefix+"STREAM.PURGE.KV_"+bucket, req)
	if err != nil {
		return 0, s.fail(ctx, err)
	}
	var resp struct {
		Purged uint64              `json:"purged"`
		Error  *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return 0, fmt.Errorf("jetstream: purge of %s: %w", key, err)
	}
	if resp.Error != nil {
		return 0, s.fail(ctx, resp.Error)
	}
	return resp.Purged, nil
}
