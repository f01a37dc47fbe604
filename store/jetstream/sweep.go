package jetstream

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pigeon/store"
)

// The ids sweep. A trim frees the ids entries of the messages it removes,
// and owes those it could not free (trim.go); but a process that ends
// owing entries, or owes more than maxIDDebt, and every entry an older
// version left behind, stay in the bucket with no one to free them. The
// sweep frees them: it walks the bucket's entries in the order of their
// revisions, sweepChunk a step, from where the last step stopped, back to
// the start once it reaches the end, and frees an entry only once it has
// shown, at the leaders, that no message holds the entry's id.
//
// A step frees entry E of key K, naming subject S, when:
//
//  1. the bucket's leader has E as K's entry, at revision R, written at T;
//  2. T is more than 2×Options.Timeout and sweepGrace ago, by this node's
//     clock: no append that wrote E is still under way (an append of the
//     id takes E over after 2×Options.Timeout, claimID; the sweep, with no
//     one waiting on it, waits longer);
//  3. then the leader of S's stream does not hold the id's message.
//
// and then purges K's revisions up to R. E's message is gone (3) and will
// not come (2), so no message holds the id. A claim of the id written
// since E was read (an append taking E over, or creating the id afresh
// after another freed it) is above R and stays; so does its message, on S
// or another subject. An entry whose message is held is never freed,
// whichever node holds the message's stream: the id stays the message's,
// and an append of it is refused as a duplicate.
//
// Cost. A step reads at most sweepChunk entries (a direct get each, from
// any replica), and the message of each (a direct get, and its stream's
// info the first time the process meets the subject); only an entry
// whose message the replica that answered does not hold costs more: a
// read of the entry from the bucket's leader and, when it is old enough,
// a read of the message from its stream's leader and a purge. idFreers
// entries are looked at a time. A trim runs a step before its own (when
// the process owes no entry), at most one step every sweepEvery in a
// process and one at a time: a pass over a bucket of n entries takes
// n/sweepChunk steps. Each request is bounded by Options.Timeout. A step
// that fails (no quorum, the trim's ctx ended) leaves its entries as they
// are, and the next step starts again where it started, up to
// sweepRetries times (then the next pass looks at them again).

const (
	// sweepChunk is how many ids entries a step of the sweep looks at.
	sweepChunk = 1024
	// sweepEvery is the least time between two steps of a process's
	// sweep.
	sweepEvery = 10 * time.Second
	// sweepGrace is how much older than 2×Options.Timeout an entry whose
	// message is missing must be before the sweep frees it.
	sweepGrace = 10 * time.Minute
	// sweepRetries is how many steps in a row start at the same revision
	// and fail before the next one starts past the entries they read.
	sweepRetries = 3
)

// idSweep is the state of a store's ids sweep.
type idSweep struct {
	// mu is held by the step under way: a trim finding it held skips its
	// step.
	mu sync.Mutex
	// bucket is the ids bucket's stream, once read.
	bucket jetstream.Stream
	// next is the revision the next step reads from (0: a pass begins),
	// fails how many steps in a row failed from there.
	next  uint64
	fails int
	// at is when the last step began.
	at time.Time
	// now, when set (tests), is the clock that ages the entries.
	now func() time.Time
	// checked, when set (tests), runs for each entry the step frees,
	// after its checks and before its purge.
	checked func(key string)
}

// owing reports whether the store owes ids entries (trim.go).
func (s *Store) owing() bool {
	s.debtMu.Lock()
	defer s.debtMu.Unlock()
	return len(s.idDebt) > 0
}

// maybeSweepIDs runs a step of the ids sweep, unless the store owes
// entries (its trims free those first), another step is under way, or
// the last began less than sweepEvery ago. A step that fails leaves its
// entries for a later one: it does not fail the trim.
func (s *Store) maybeSweepIDs(ctx context.Context) {
	if s.owing() {
		return
	}
	w := &s.sweep
	if !w.mu.TryLock() {
		return
	}
	defer w.mu.Unlock()
	if !w.at.IsZero() && time.Since(w.at) < sweepEvery {
		return
	}
	w.at = time.Now()
	_, _ = s.sweepStep(ctx)
}

// sweepIDs runs a step of the ids sweep now, once the step under way (if
// any) is done, and returns how many entries it freed.
func (s *Store) sweepIDs(ctx context.Context) (int, error) {
	s.sweep.mu.Lock()
	defer s.sweep.mu.Unlock()
	return s.sweepStep(ctx)
}

// sweepStep reads up to sweepChunk entries of the ids bucket from
// revision s.sweep.next on, frees those no message holds (sweepEntry),
// and moves s.sweep.next past them, to 0 at the bucket's end; on a
// failure it leaves s.sweep.next where it was (idSweep.failed). The
// caller holds s.sweep.mu.
func (s *Store) sweepStep(ctx context.Context) (int, error) {
	w := &s.sweep
	bucket := s.bucketName("ids")
	if w.bucket == nil {
		st, err := within(ctx, s, func(ctx context.Context) (jetstream.Stream, error) {
			return s.js.Stream(ctx, "KV_"+bucket)
		})
		if err != nil {
			return 0, err
		}
		w.bucket = st
	}
	filter := "$KV." + bucket + ".>"
	var es []*jetstream.RawStreamMsg
	next := max(w.next, 1)
	for len(es) < sweepChunk {
		// The first entry at or after next.
		raw, err := within(ctx, s, func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
			return direct(ctx, s.opts.Timeout, func() (*jetstream.RawStreamMsg, error) {
				return w.bucket.GetMsg(ctx, next, jetstream.WithGetMsgSubject(filter))
			})
		})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			next = 0 // the pass is done: the next step begins another
			break
		}
		if err != nil {
			return 0, w.failed(next, err)
		}
		es = append(es, raw)
		next = raw.Sequence + 1
	}
	n, err := s.sweepEntries(ctx, bucket, es)
	if err != nil {
		return n, w.failed(next, err)
	}
	w.next, w.fails = next, 0
	return n, nil
}

// failed notes a step that failed, err, with next the revision after the
// last entry it read: the next step starts again where this one started,
// unless the steps from there have failed sweepRetries times in a row (an
// entry whose reads keep failing would stop the sweep for good); then it
// starts at next, and the entries passed over are looked at again in the
// next pass.
func (w *idSweep) failed(next uint64, err error) error {
	w.fails++
	if w.fails >= sweepRetries {
		w.next, w.fails = next, 0
	}
	return err
}

// sweepEntries runs sweepEntry on each of es, idFreers at a time, and
// returns how many it freed and the first failure (after which it starts
// no other).
func (s *Store) sweepEntries(ctx context.Context, bucket string, es []*jetstream.RawStreamMsg) (int, error) {
	var freed atomic.Int64
	_, err := inParallel(es, idFreers, func(raw *jetstream.RawStreamMsg) error {
		ok, err := s.sweepEntry(ctx, bucket, raw)
		if ok {
			freed.Add(1)
		}
		return err
	})
	return int(freed.Load()), err
}

// sweepEntry frees raw, an entry of the ids bucket as a replica read it,
// when no message holds its id (see the comment at the top of this file),
// and reports whether it did. An entry that is not one the store writes
// (a key that does not decode, a delete marker) is left alone.
func (s *Store) sweepEntry(ctx context.Context, bucket string, raw *jetstream.RawStreamMsg) (bool, error) {
	key := strings.TrimPrefix(raw.Subject, "$KV."+bucket+".")
	enc, ok := strings.CutPrefix(key, "k")
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if !ok || err != nil || isMarker((*nats.RawStreamMsg)(raw)) {
		return false, nil
	}
	id := string(b)
	// Most entries are of held messages: a replica's answer is enough to
	// leave them.
	_, err = within(ctx, s, func(ctx context.Context) (store.Message, error) { return s.find(ctx, string(raw.Data), id) })
	if !errors.Is(err, store.ErrNotFound) {
		return false, stored(err)
	}
	held, err := within(ctx, s, func(ctx context.Context) (*nats.RawStreamMsg, error) { return leaderLast(ctx, s.nc, bucket, key) })
	if err != nil {
		return false, err
	}
	if held == nil || held.Sequence != raw.Sequence {
		// Freed, or written since the walk read it: a later pass looks.
		return false, nil
	}
	now := time.Now
	if s.sweep.now != nil {
		now = s.sweep.now
	}
	if !now().After(held.Time.Add(2*s.opts.Timeout + sweepGrace)) {
		return false, nil // its append may be under way
	}
	// Read after the entry: a message of the id stored since is of a
	// claim above held.Sequence, which the purge leaves.
	_, err = within(ctx, s, func(ctx context.Context) (store.Message, error) { return s.leaderFind(ctx, string(held.Data), id) })
	if !errors.Is(err, store.ErrNotFound) {
		return false, stored(err)
	}
	if s.sweep.checked != nil {
		s.sweep.checked(key)
	}
	n, err := s.purgeUpTo(ctx, bucket, key, held.Sequence)
	return n > 0, err
}

// within runs a request with ctx bounded by Options.Timeout, as the
// trim's ctx may allow it longer, and maps its failure as fail does: a
// leader lost (no quorum) fails the step in that time, with
// store.ErrNoQuorum.
func within[T any](ctx context.Context, s *Store, req func(ctx context.Context) (T, error)) (T, error) {
	rctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	v, err := req(rctx)
	return v, s.fail(ctx, err)
}

// stored is the error of a read of an entry's message that found it (nil)
// or failed (err): a message that does not decode is held all the same.
func stored(err error) error {
	var corrupt *store.CorruptError
	if errors.As(err, &corrupt) {
		return nil
	}
	return err
}
