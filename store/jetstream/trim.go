package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pigeon/store"
)

// Message retention. A trim purges the front of a subject's stream,
// trimChunk messages a step, and each step frees the ids bucket's entries
// of the messages it removed: the bucket holds the ids of the retained
// messages and of the appends under way, not of every message ever
// stored.
//
// An entry written after its message was removed is another append's
// claim of the id, which must stay. So a step, once it has read its
// messages and before it purges them, reads the bucket's last revision R
// and then the stream's first sequence F, each from its stream's leader.
// Every message of the step from F on was still held when R was read, and
// no append takes over the id of a message that is held (claimID), so each
// revision up to R of such a message's key is its own entry (or an older
// one). Once the messages are purged, each key is purged up to R
// (freeID, idFreers keys at a time): a claim written since is above R and
// stays. Messages before F were purged meanwhile by another trim
// (another node's), which frees their entries.
//
// An entry whose purge fails (the trim's ctx ended, no quorum) is owed:
// the store keeps it in memory, up to maxIDDebt of them, and the next trim
// of any subject purges it first, up to the same R, which is safe however
// late (its message is gone). A process that ends owing entries, or that
// owes more than maxIDDebt, leaves them in the bucket, as older versions
// left the entries of the messages they trimmed. The ids sweep
// (sweep.go), a step of which a trim runs when nothing is owed, frees
// them in time; until then such an entry makes the first re-use of its
// id wait for its append (awaitIndexed) before taking it over.

const (
	// trimChunk is how many messages a step of a trim reads before it
	// purges them and frees their ids, and how many owed entries a trim
	// pays first.
	trimChunk = 1024
	// idFreers is how many purges of ids entries a trim has in flight.
	idFreers = 16
	// maxIDDebt bounds the ids entries a store owes (owe).
	maxIDDebt = 1 << 16
)

// idEntry names the revisions up to rev of key in the ids bucket.
type idEntry struct {
	key string
	rev uint64
}

// TrimBefore implements store.Trimmer: it purges the front of the
// subject's stream up to the first message accepted at or after t.
func (s *Store) TrimBefore(ctx context.Context, subject string, t time.Time) (int, error) {
	return s.trimFront(ctx, subject, func(raw *jetstream.RawStreamMsg) bool { return !msgTime(raw).Before(t) })
}

// TrimThrough implements store.SeqTrimmer: it purges the front of the
// subject's stream through the message with sequence seq.
func (s *Store) TrimThrough(ctx context.Context, subject string, seq uint64) (int, error) {
	return s.trimFront(ctx, subject, func(raw *jetstream.RawStreamMsg) bool { return raw.Sequence > seq })
}

// trim is what one trimFront call knows of its subject's stream.
type trim struct {
	st      jetstream.Stream
	subject string
	filter  string // the stream's NATS subjects
	last    uint64 // the stream's last sequence when the trim began
	keep    func(raw *jetstream.RawStreamMsg) bool
	// clock is the time of the subject's newest message, read when the
	// first message with an idempotency key is met (zero until then).
	clock time.Time
}

// trimFront removes the messages of subject's stream from the front up to
// the first one keep accepts, a step (trimStep) at a time, and returns
// how many. It first frees ids entries that earlier trims owe (payIDs),
// then runs a step of the ids sweep (maybeSweepIDs).
// On an error, the count is of the steps done before it.
func (s *Store) trimFront(ctx context.Context, subject string, keep func(raw *jetstream.RawStreamMsg) bool) (int, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	st, err := s.stream(ctx, subject, false)
	if st == nil || err != nil {
		return 0, err
	}
	if err := s.recheck(ctx); err != nil {
		return 0, err
	}
	s.payIDs(ctx)
	s.maybeSweepIDs(ctx)
	info, err := st.Info(ctx)
	if err != nil {
		return 0, s.fail(ctx, err)
	}
	if reason := dropsStream(info.Config); reason != "" {
		return 0, fmt.Errorf("jetstream: stream %s was changed and cannot be used: %s", info.Config.Name, reason)
	}
	t := &trim{st: st, subject: subject, filter: info.Config.Subjects[0], last: info.State.LastSeq, keep: keep}
	n := 0
	for seq := info.State.FirstSeq; seq > 0 && seq <= t.last; {
		k, next, err := s.trimStep(ctx, t, seq)
		n += k
		if err != nil {
			return n, err
		}
		seq = next
	}
	return n, nil
}

// trimStep reads up to trimChunk messages from sequence from on (up to
// the first one t.keep accepts), keeps copies of those whose idempotency
// key is live, purges them and frees their ids. It returns how many it
// removed and the sequence the trim goes on from, 0 when it is done.
func (s *Store) trimStep(ctx context.Context, t *trim, from uint64) (int, uint64, error) {
	var (
		n     int
		keyed []store.Message // the messages with an idempotency key
		ids   []seqID         // the messages' ids
	)
	cut, next := t.last+1, uint64(0)
	for seq := from; seq <= t.last; {
		if n == trimChunk {
			cut, next = seq, seq
			break
		}
		raw, err := direct(ctx, s.opts.Timeout, func() (*jetstream.RawStreamMsg, error) {
			return t.st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(t.filter))
		})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			// None from seq on, by a replica that may be behind the
			// stream's last sequence: purge only what was read (and
			// kept, when its key is live), not the messages past it.
			cut = seq
			break
		}
		if err != nil {
			return 0, 0, s.fail(ctx, err)
		}
		if t.keep(raw) {
			cut = raw.Sequence
			break
		}
		if raw.Header.Get(hdrIdem) != "" || raw.Header.Get(hdrIdem+hdrEncoded) != "" {
			m, err := decodeMessage(t.subject, raw)
			if err != nil {
				return 0, 0, err
			}
			keyed = append(keyed, m)
		}
		// An id that does not decode names no entry: the message goes
		// all the same.
		if id, err := text(raw, hdrID); err == nil && id != "" {
			ids = append(ids, seqID{raw.Sequence, id})
		}
		n++
		seq = raw.Sequence + 1
	}
	if n == 0 {
		return 0, 0, nil
	}
	if len(keyed) > 0 {
		if t.clock.IsZero() {
			// Keys are live by the clock of the messages, as claimIdem
			// judges them: the time of the subject's newest message.
			last, err := direct(ctx, s.opts.Timeout, func() (*jetstream.RawStreamMsg, error) {
				return t.st.GetMsg(ctx, t.last, jetstream.WithGetMsgSubject(t.filter))
			})
			if err != nil {
				return 0, 0, s.fail(ctx, err)
			}
			t.clock = msgTime(last)
		}
		if err := s.keep(ctx, keyed, t.clock); err != nil {
			return 0, 0, err
		}
	}
	if s.trimRead != nil {
		s.trimRead()
	}
	held, err := s.heldIDs(ctx, t.st, ids)
	if err != nil {
		return 0, 0, err
	}
	if err := t.st.Purge(ctx, jetstream.WithPurgeSequence(cut)); err != nil {
		if s.purgedTo(ctx, t.st, cut) {
			// Applied all the same (its answer was lost): the messages
			// are gone and their entries owed.
			s.owe(held)
			return n, 0, s.fail(ctx, err)
		}
		return 0, 0, s.fail(ctx, err)
	}
	if s.trimPurged != nil {
		s.trimPurged()
	}
	left, err := s.freeIDs(ctx, held)
	s.owe(left)
	if err != nil {
		return n, 0, fmt.Errorf("jetstream: trimmed %d messages of subject %q, but %d of their ids entries are not freed yet (the next trim frees them): %w",
			n, t.subject, len(left), s.fail(ctx, err))
	}
	return n, next, nil
}

// seqID is a message's sequence and id.
type seqID struct {
	seq uint64
	id  string
}

// heldIDs returns the ids bucket's entries of the messages ids of stream
// st to free once they are purged: the key of each message the stream's
// leader still holds after the bucket's last revision was read, up to
// that revision (see the comment at the top of this file).
func (s *Store) heldIDs(ctx context.Context, st jetstream.Stream, ids []seqID) ([]idEntry, error) {
	bucket, err := s.js.Stream(ctx, "KV_"+s.bucketName("ids"))
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	rev := bucket.CachedInfo().State.LastSeq
	info, err := st.Info(ctx)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	out := make([]idEntry, 0, len(ids))
	for _, m := range ids {
		if m.seq >= info.State.FirstSeq {
			out = append(out, idEntry{token(m.id), rev})
		}
	}
	return out, nil
}

// purgedTo reports whether the leader of stream st holds no message
// before cut, read within Options.Timeout even after ctx has ended.
func (s *Store) purgedTo(ctx context.Context, st jetstream.Stream, cut uint64) bool {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
	defer cancel()
	info, err := st.Info(ictx)
	return err == nil && info.State.FirstSeq >= cut
}

// freeIDs purges the revisions of each entry of es up to its rev, idFreers
// at a time, and returns the entries it did not purge (after a purge
// fails, it starts no other) and the first failure.
func (s *Store) freeIDs(ctx context.Context, es []idEntry) ([]idEntry, error) {
	bucket := s.bucketName("ids")
	return inParallel(es, idFreers, func(e idEntry) error { return s.freeID(ctx, bucket, e) })
}

// freeID purges the revisions of e.key up to e.rev. A purge up to a
// revision far above the key's own makes the server walk the bucket's
// sequences between the two, so the entry is read first (a direct get)
// and purged up to its own revision when that is at most e.rev (one above
// is a claim written since, which stays). A key the read does not find,
// or an entry the purge does not find (a replica behind answered the
// read), is purged up to e.rev: cheap for a key without entries, rare
// otherwise.
func (s *Store) freeID(ctx context.Context, bucket string, e idEntry) error {
	got, err := direct(ctx, s.opts.Timeout, func() (jetstream.KeyValueEntry, error) { return s.ids.Get(ctx, e.key) })
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return err
	case got.Revision() > e.rev:
		return nil
	default:
		n, err := s.purgeUpTo(ctx, bucket, e.key, got.Revision())
		if n > 0 || err != nil {
			return err
		}
	}
	_, err = s.purgeUpTo(ctx, bucket, e.key, e.rev)
	return err
}

// owe keeps es, entries a trim could not free, for the next trim to free
// (payIDs); those past maxIDDebt owed are left in the bucket.
func (s *Store) owe(es []idEntry) {
	if len(es) == 0 {
		return
	}
	s.debtMu.Lock()
	defer s.debtMu.Unlock()
	room := max(maxIDDebt-len(s.idDebt), 0)
	s.idDebt = append(s.idDebt, es[:min(len(es), room)]...)
}

// payIDs frees up to trimChunk of the entries owed; those it cannot free
// stay owed.
func (s *Store) payIDs(ctx context.Context) {
	s.debtMu.Lock()
	k := min(len(s.idDebt), trimChunk)
	due := slices.Clone(s.idDebt[len(s.idDebt)-k:])
	s.idDebt = s.idDebt[:len(s.idDebt)-k]
	s.debtMu.Unlock()
	left, _ := s.freeIDs(ctx, due)
	s.owe(left)
}
