package jetstream

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pigeon/store"
)

// kvKey is the key of bucket/key in the store's KV bucket.
func kvKey(bucket, key string) string { return token(bucket) + "." + token(key) }

// Put implements store.KV.
func (s *Store) Put(ctx context.Context, bucket, key string, val []byte) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	rev, err := s.kv.Put(ctx, kvKey(bucket, key), val)
	if err == nil {
		s.wroteDirectory(bucket, rev)
	}
	return s.fail(ctx, err)
}

// Create implements store.KVCreator: the key is created only if it has no
// value (a deleted key counts as none), by the JetStream key-value
// bucket's own create, which the stream's leader decides once for all
// nodes.
func (s *Store) Create(ctx context.Context, bucket, key string, val []byte) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	rev, err := s.kv.Create(ctx, kvKey(bucket, key), val)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return store.ErrExists
	}
	if err == nil {
		s.wroteDirectory(bucket, rev)
	}
	return s.fail(ctx, err)
}

// Get implements store.KV. A record of the access directory (an account,
// role, grant or revocation) is read from the stream's leader: the
// directory reads one to compare it with its own copy before it swaps it
// (Swap, which compares at the leader), and a replica behind would answer
// with a value older than this node's own last write of it, which the
// directory would take for another node's change.
func (s *Store) Get(ctx context.Context, bucket, key string) ([]byte, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	if directoryBucket(bucket) >= 0 {
		return s.leaderGet(ctx, s.bucketName("kv"), kvKey(bucket, key))
	}
	return getValue(ctx, s, s.kv, kvKey(bucket, key))
}

// Delete implements store.KV.
func (s *Store) Delete(ctx context.Context, bucket, key string) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	k := kvKey(bucket, key)
	if err := s.kv.Delete(ctx, k); err != nil {
		return s.fail(ctx, err)
	}
	return s.wroteDeletion(ctx, bucket, k)
}

// wroteDeletion notes this node's delete of k, of bucket, when it is a
// directory bucket (see wroteDirectory): a barrier waits for the delete
// marker, whose revision is the last of the key's history.
func (s *Store) wroteDeletion(ctx context.Context, bucket, k string) error {
	if directoryBucket(bucket) < 0 {
		return nil
	}
	h, err := s.kv.History(ctx, k)
	if err != nil {
		return s.fail(ctx, err)
	}
	s.wroteDirectory(bucket, h[len(h)-1].Revision())
	return nil
}

// Swap implements store.KVSwapper by revision: it reads the key's last
// entry from the stream's leader (a replica behind could hold an older
// value that matches old), compares its value with old (a delete marker,
// or no entry, is no value), and writes with that entry's revision as the
// stream's precondition: an update (a create where the key has no value),
// or a delete marker. The leader decides the precondition once for every
// node, so of two swaps from one revision one at most is made. A write
// refused because the key moved on since the read is read again: made
// when the key still holds old (another write of the same bytes), and
// ErrChanged otherwise.
func (s *Store) Swap(ctx context.Context, bucket, key string, old, val []byte) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	k := kvKey(bucket, key)
	for {
		m, err := leaderLastOp(ctx, s.nc, s.bucketName("kv"), k)
		if err != nil {
			return s.fail(ctx, err)
		}
		var cur []byte
		var rev uint64 // the precondition: 0, no entry at all
		if m != nil {
			rev = m.Sequence
			if !isMarker(m) {
				cur = m.Data
				if cur == nil {
					cur = []byte{}
				}
			}
		}
		if (cur != nil) != (old != nil) || !bytes.Equal(cur, old) {
			return store.ErrChanged
		}
		switch {
		case cur == nil && val == nil:
			return nil // no value, and none wanted
		case val == nil:
			err = s.kv.Delete(ctx, k, jetstream.LastRevision(rev))
			if err == nil {
				return s.wroteDeletion(ctx, bucket, k)
			}
		default:
			var wrote uint64
			if wrote, err = s.kv.Update(ctx, k, val, rev); err == nil {
				s.wroteDirectory(bucket, wrote)
				return nil
			}
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
			return s.fail(ctx, err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

var (
	_ store.KVCreator = (*Store)(nil)
	_ store.KVSwapper = (*Store)(nil)
)

// wroteDirectory notes this node's write rev of bucket, when it is a
// directory bucket: a barrier waits for it, and this node's own lists
// never read the bucket as it was before it.
func (s *Store) wroteDirectory(bucket string, rev uint64) {
	i := directoryBucket(bucket)
	if i < 0 {
		return
	}
	maxRev(&s.dirRev, rev)
	var r dirRevs
	r[i] = rev
	s.raiseFloor(r)
}

// raiseFloor raises the revisions below which no list of a directory
// bucket is returned.
func (s *Store) raiseFloor(r dirRevs) {
	s.seenMu.Lock()
	defer s.seenMu.Unlock()
	for i := range r {
		s.dirFloor[i] = max(s.dirFloor[i], r[i])
	}
}

// maxRev raises a to rev unless it is higher already.
func maxRev(a *atomic.Uint64, rev uint64) {
	for {
		cur := a.Load()
		if cur >= rev || a.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// List implements store.KV.
func (s *Store) List(ctx context.Context, bucket string) (map[string][]byte, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	var vals map[string][]byte
	var err error
	if i := directoryBucket(bucket); i >= 0 {
		vals, err = s.directoryValues(ctx, i)
	} else {
		vals, _, err = s.values(ctx, s.kv, token(bucket)+".*")
	}
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(vals))
	for k, v := range vals {
		_, enc, _ := strings.Cut(k, ".")
		key, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(enc, "k"))
		if err != nil {
			return nil, &store.CorruptError{File: s.bucketName("kv"), Reason: "key " + k + " does not decode"}
		}
		out[string(key)] = v
	}
	return out, nil
}

// getValue reads one key; a missing or deleted one is store.ErrNotFound.
// The read is a direct get, which a replica behind may answer: a key it
// does not hold yet is read again from the stream's leader before it is
// missing, as callers decide on it (the engine takes a public key whose
// owner is missing, and refuses one whose owner it cannot read after its
// create found one).
func getValue(ctx context.Context, s *Store, kv jetstream.KeyValue, key string) ([]byte, error) {
	e, err := direct(ctx, s.opts.Timeout, func() (jetstream.KeyValueEntry, error) { return kv.Get(ctx, key) })
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return s.leaderGet(ctx, kv.Bucket(), key)
	}
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return e.Value(), nil
}

// values reads every live key of kv matching filter (all with "") in one
// watch: the watcher sends the current values, then nil. seen is the
// highest revision among them and the deletions it met: the replica that
// answered had every revision up to it.
func (s *Store) values(ctx context.Context, kv jetstream.KeyValue, filter string) (out map[string][]byte, seen uint64, err error) {
	if filter == "" {
		filter = ">"
	}
	w, err := kv.Watch(ctx, filter)
	if err != nil {
		return nil, 0, s.fail(ctx, err)
	}
	defer w.Stop()
	out = map[string][]byte{}
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				return out, seen, nil
			}
			seen = max(seen, e.Revision())
			if e.Operation() == jetstream.KeyValuePut {
				out[e.Key()] = e.Value()
			}
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

// entry is a key's value and revision.
type entry struct {
	val []byte
	rev uint64
}

// entries reads every live key of kv, with its revision, in one watch.
func (s *Store) entries(ctx context.Context, kv jetstream.KeyValue) (map[string]entry, error) {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	defer w.Stop()
	out := map[string]entry{}
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				return out, nil
			}
			if e.Operation() == jetstream.KeyValuePut {
				out[e.Key()] = entry{e.Value(), e.Revision()}
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// directoryValues reads directory bucket i, again while the replica that
// answered is behind a revision this node knows of: the engine replaces
// its whole directory with what it reads, and a read from behind would
// bring back what a later change took away (a revoked grant, a removed
// role), on a node that had already applied, and confirmed, the change.
// A replica still behind after a few tries fails the read, retryable;
// the engine then keeps the directory it has.
func (s *Store) directoryValues(ctx context.Context, i int) (map[string][]byte, error) {
	pause := 5 * time.Millisecond
	for try := 1; ; try++ {
		vals, seen, err := s.values(ctx, s.kv, token(directoryBuckets[i])+".*")
		if err != nil {
			return nil, err
		}
		s.seenMu.Lock()
		floor := s.dirFloor[i]
		if seen >= floor {
			s.dirFloor[i] = seen
			s.dirSeen[i] = max(s.dirSeen[i], seen)
		}
		s.seenMu.Unlock()
		if seen >= floor {
			return vals, nil
		}
		if try == staleTries {
			return nil, fmt.Errorf("%w: jetstream: the replica read for %s is behind (revision %d, want %d)", store.ErrNoQuorum, directoryBuckets[i], seen, floor)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pause):
		}
		pause *= 2
	}
}

// staleTries is how often a directory list is read before a replica
// behind fails it.
const staleTries = 5
