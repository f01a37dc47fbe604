package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"pigeon/store"
)

// Messages: one tidwall/wal log per subject, entry index == sequence.
// Only an index is kept in memory (see msgIndex); bodies are read from disk.

// A location packs a subject number and a sequence into 64 bits.
const seqBits = 40

func pack(num uint32, seq uint64) uint64 { return uint64(num)<<seqBits | seq }
func unpack(loc uint64) (uint32, uint64) { return uint32(loc >> seqBits), loc & (1<<seqBits - 1) }

type subject struct {
	name   string
	num    uint32
	w      *logw
	trimMu sync.Mutex // one TrimBefore at a time
	track  acceptTrack
	// bytes is the sum of the body lengths of the committed messages
	// retained (store.ByteTrimmer): counted by Open's scan, raised as
	// each write commits and lowered by each trim.
	bytes atomic.Uint64
}

type messages struct {
	mu     sync.RWMutex
	byName map[string]*subject
	list   []*subject // by num
	idx    msgIndex
}

// Append implements store.MessageLog. Under SyncBatch and SyncAlways a
// returned Append is durable; under SyncNone it survives a process crash
// only. The idempotency check and the write are one step: the key is
// reserved before the record is queued, and a duplicate of a record still
// being written waits for it.
func (s *Store) Append(ctx context.Context, m store.Message) (store.Message, bool, error) {
	return s.append(ctx, m, nil)
}

// append is Append, keeping the acceptance record acc with the message
// when it is not nil (AppendAccepted).
func (s *Store) append(ctx context.Context, m store.Message, acc *store.AuditRecord) (store.Message, bool, error) {
	if err := s.enter(ctx); err != nil {
		return store.Message{}, false, err
	}
	defer s.leave()
	return s.appendLeft(m, acc)
}

// checkAppend refuses a message no log can take and returns its subject.
func (s *Store) checkAppend(m store.Message) (*subject, error) {
	if m.Subject == "" {
		return nil, errors.New("wal: append: empty subject")
	}
	if len(m.Body)+len(m.ID)+len(m.IdemKey)+64 > s.opts.MaxRecordSize {
		return nil, fmt.Errorf("wal: append: message of %d bytes exceeds MaxRecordSize", len(m.Body))
	}
	return s.subject(m.Subject, true)
}

// appendLeft is append once the store is entered.
func (s *Store) appendLeft(m store.Message, acc *store.AuditRecord) (store.Message, bool, error) {
	sub, err := s.checkAppend(m)
	if err != nil {
		return store.Message{}, false, err
	}
	var skip []uint64 // claims found to be other keys'
	for range 100 {
		stored, dup, retry, r, err := s.appendOnce(sub, m, acc, skip)
		if r != nil {
			sub.w.mu.Lock()
			if err = sub.w.awaitLocked(r); err != nil {
				return store.Message{}, false, err
			}
			return stored, false, nil
		}
		if !retry.again {
			return stored, dup, err
		}
		if retry.skip != 0 {
			skip = append(skip, retry.skip)
		}
	}
	return store.Message{}, false, fmt.Errorf("wal: append to %q: idempotency key %q kept changing", m.Subject, m.IdemKey)
}

// retry says whether appendOnce must be tried again, and which claim to
// pass over when it turned out to be another key's.
type retry struct {
	again bool
	skip  uint64
}

// appendOnce enqueues m's write and returns its request, which the caller
// awaits (sub.w.awaitLocked); for a duplicate, a retry or an error it
// returns no request.
func (s *Store) appendOnce(sub *subject, m store.Message, acc *store.AuditRecord, skip []uint64) (store.Message, bool, retry, *wreq, error) {
	w := sub.w
	x := &s.msgs.idx
	// What allocates is done before the log's lock is taken: the request
	// (with the acceptance record it keeps) and room for its record. A
	// publisher held there by the garbage collector's assist would hold
	// every other publisher of the subject.
	var (
		r   *wreq
		rec *store.AuditRecord // the request's copy of acc
	)
	if acc != nil {
		ar := &acceptedReq{acc: *acc}
		r, rec = &ar.wreq, &ar.acc
		r.aux = rec
	} else {
		r = new(wreq)
	}
	r.id, r.key, r.body = m.ID, m.IdemKey, len(m.Body)
	r.buf = getRecBuf()
	if rec != nil {
		r.buf.grow(acceptedSize(&m, rec))
	} else {
		r.buf.grow(messageSize(&m))
	}
	at := unixNano(m.Time)
	w.mu.Lock()
	if w.failed != nil {
		w.mu.Unlock()
		r.freeBuf()
		return store.Message{}, false, retry{}, nil, w.failed
	}
	seq := w.next
	if seq >= 1<<seqBits {
		w.mu.Unlock()
		r.freeBuf()
		return store.Message{}, false, retry{}, nil, fmt.Errorf("wal: subject %q is out of sequences", sub.name)
	}
	m.Seq = seq
	loc := pack(sub.num, seq)
	r.loc = loc
	x.mu.Lock()
	if m.IdemKey != "" {
		if e, ok := x.findClaim(m.IdemKey, at, skip); ok {
			x.mu.Unlock()
			w.mu.Unlock()
			r.freeBuf()
			stored, dup, rt, err := s.duplicate(e, m.IdemKey)
			return stored, dup, rt, nil, err
		}
		x.claim(m.IdemKey, loc, unixNano(m.IdemExpires), r)
	}
	x.addID(m.ID, loc)
	x.clock = max(x.clock, at)
	x.sweepLocked()
	x.mu.Unlock()
	if rec != nil {
		// The acceptance names the message's sequence, as the broker's
		// own record does: the record encodes it from the message, and
		// the flusher (chainLocked) from the message's location.
		r.buf.b = appendAccepted(r.buf.b[:0], &m, rec, sub.track.queue(seq))
	} else {
		r.buf.b = appendMessage(r.buf.b[:0], &m)
	}
	r.one[0] = r.buf.b
	r.data = r.one[:]
	w.enqueueLocked(r)
	w.mu.Unlock()
	return m, false, retry{}, r, nil
}

// AppendAcceptedBatch implements store.BatchAppender: it enqueues the
// messages' writes in order, each as AppendAccepted would, and then waits
// for them, so that under group commit one write and one fsync cover the
// batch. A message whose idempotency key an earlier one of the batch
// holds waits for the ones before it first, and is then a duplicate of
// that one.
func (s *Store) AppendAcceptedBatch(ctx context.Context, ms []store.Message, accepted []store.AuditRecord) []store.Appended {
	out := make([]store.Appended, len(ms))
	if err := s.enter(ctx); err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	defer s.leave()
	type inflight struct {
		i   int
		sub *subject
		r   *wreq
		m   store.Message
	}
	var (
		pend []inflight
		keys = map[string]bool{}
	)
	await := func() {
		for _, p := range pend {
			p.sub.w.mu.Lock()
			if err := p.sub.w.awaitLocked(p.r); err != nil {
				out[p.i].Err = err
			} else {
				out[p.i].Stored = p.m
			}
		}
		pend = pend[:0]
		clear(keys)
	}
	for i := range ms {
		m, acc := ms[i], accepted[i]
		if w := s.audit.w; w.unusable.Load() {
			w.mu.Lock()
			out[i].Err = w.failed
			w.mu.Unlock()
			continue
		}
		if m.IdemKey != "" && keys[m.Subject+"\x00"+m.IdemKey] {
			await()
		}
		acc.Subject, acc.MessageID = m.Subject, m.ID
		sub, err := s.checkAppend(m)
		if err != nil {
			out[i].Err = err
			continue
		}
		stored, dup, rt, r, err := s.appendOnce(sub, m, &acc, nil)
		switch {
		case r != nil:
			pend = append(pend, inflight{i, sub, r, stored})
			if m.IdemKey != "" {
				keys[m.Subject+"\x00"+m.IdemKey] = true
			}
		case rt.again:
			// The careful path: wait for what is in flight, then retry.
			await()
			out[i].Stored, out[i].Dup, out[i].Err = s.appendLeft(m, &acc)
		default:
			out[i] = store.Appended{Stored: stored, Dup: dup, Err: err}
		}
	}
	await()
	return out
}

// duplicate returns the original of an idempotent retry with key, waiting
// for it when it is still being written. It asks for a retry when the
// original went away meanwhile (its write failed, or retention removed
// it), and to skip the claim when the original holds another key (their
// hashes collide).
func (s *Store) duplicate(e idemEnt, key string) (store.Message, bool, retry, error) {
	num, seq := unpack(e.loc)
	sub := s.subjectByNum(num)
	if sub == nil {
		return store.Message{}, false, retry{again: true}, nil
	}
	if e.req != nil {
		sub.w.mu.Lock()
		err := sub.w.waitOtherLocked(e.req)
		sub.w.mu.Unlock()
		if err != nil {
			return store.Message{}, false, retry{again: true}, nil
		}
	}
	m, err := s.readMessage(sub, seq)
	if errors.Is(err, store.ErrNotFound) {
		x := &s.msgs.idx
		x.mu.Lock()
		k, ok := x.kept[e.loc]
		gone := !ok && seq < sub.w.first.Load()
		if gone {
			// Trimmed without a copy (over the budget): its claim goes
			// with it. The trim drops it too, once it has truncated; a
			// retry that came between must not keep finding it.
			x.unclaim(key, e.loc)
		}
		x.mu.Unlock()
		if gone {
			return store.Message{}, false, retry{again: true, skip: e.loc}, nil
		}
		if !ok {
			return store.Message{}, false, retry{again: true}, nil
		}
		m, err = k, nil // trimmed while its claim was live
		m.Body = bytes.Clone(k.Body)
	}
	if err != nil {
		return store.Message{}, false, retry{}, err
	}
	if m.IdemKey != key {
		return store.Message{}, false, retry{again: true, skip: e.loc}, nil
	}
	return m, true, retry{}, nil
}

var _ store.BatchAppender = (*Store)(nil)
