package memory

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"time"

	"pigeon/store"
)

// messageLog is every subject's log, the id index and the idempotency
// entries, under one lock: Append must check idempotency, assign the sequence
// and index the id in one step.
type messageLog struct {
	mu       sync.RWMutex
	subjects map[string]*subjectLog
	byID     map[string]msgRef
	idem     idempotency
}

// subjectLog is one subject's retained messages: msgs[i].Seq == first+i.
type subjectLog struct {
	msgs []store.Message
	// first is the sequence of msgs[0]; when msgs is empty it is the next
	// sequence Append assigns.
	first uint64
}

// msgRef locates a message for Lookup.
type msgRef struct {
	log *subjectLog
	seq uint64
}

func (l *messageLog) init() {
	l.subjects = make(map[string]*subjectLog)
	l.byID = make(map[string]msgRef)
	l.idem.init()
}

func (l *messageLog) release() {
	l.subjects = nil
	l.byID = nil
	l.idem = idempotency{}
}

// last is the sequence of the last message appended; first-1 when every
// message has been trimmed.
func (sl *subjectLog) last() uint64 { return sl.first + uint64(len(sl.msgs)) - 1 }

// get returns the retained message with sequence seq.
func (sl *subjectLog) get(seq uint64) (*store.Message, bool) {
	if seq < sl.first || seq-sl.first >= uint64(len(sl.msgs)) {
		return nil, false
	}
	return &sl.msgs[seq-sl.first], true
}

// window returns up to limit (no limit when limit <= 0) retained messages
// with Seq >= from. The result aliases the log.
func (sl *subjectLog) window(from uint64, limit int) []store.Message {
	from = max(from, sl.first)
	if from-sl.first >= uint64(len(sl.msgs)) {
		return nil
	}
	msgs := sl.msgs[from-sl.first:]
	if limit > 0 && limit < len(msgs) {
		msgs = msgs[:limit]
	}
	return msgs
}

// Append assigns the next sequence of m.Subject and stores a copy of m; see
// store.MessageLog. The idempotency key is global to the store (the broker
// scopes it). The returned message carries the caller's own Body when it
// was stored, and a copy of the original's Body when dup is true. When two
// messages share an ID, Lookup finds the later one.
func (s *Store) Append(ctx context.Context, m store.Message) (store.Message, bool, error) {
	if err := ctx.Err(); err != nil {
		return store.Message{}, false, err
	}
	given := m.Body
	m.Body = bytes.Clone(m.Body) // outside the lock; wasted only on a duplicate

	l := &s.msgs
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := s.checkClosed(); err != nil {
		return store.Message{}, false, err
	}
	if orig, ok := l.idem.find(m.IdemKey, m.Time); ok {
		orig.Body = bytes.Clone(orig.Body)
		return orig, true, nil
	}
	sl := l.subjects[m.Subject]
	if sl == nil {
		sl = &subjectLog{first: 1}
		l.subjects[m.Subject] = sl
	}
	m.Seq = sl.first + uint64(len(sl.msgs))
	sl.msgs = append(sl.msgs, m)
	if m.ID != "" {
		l.byID[m.ID] = msgRef{log: sl, seq: m.Seq}
	}
	l.idem.add(&m, s.opts.IdempotencyGrace)
	m.Body = given
	return m, false, nil
}

// Read returns copies of up to max messages of subject with Seq >= from, in
// order; max <= 0 means no limit, and from 0 reads from the first retained
// message. An unknown subject, or from beyond the last message, gives none.
func (s *Store) Read(ctx context.Context, subject string, from uint64, max int) ([]store.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l := &s.msgs
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := s.checkClosed(); err != nil {
		return nil, err
	}
	sl := l.subjects[subject]
	if sl == nil {
		return nil, nil
	}
	return copyMessages(sl.window(from, max)), nil
}

// copyMessages copies src and its bodies, the bodies into one buffer. Each
// body is capped at its length, so appending to one cannot overwrite the
// next.
func copyMessages(src []store.Message) []store.Message {
	if len(src) == 0 {
		return nil
	}
	out := make([]store.Message, len(src))
	copy(out, src)
	n := 0
	for i := range out {
		n += len(out[i].Body)
	}
	buf := make([]byte, n)
	for i := range out {
		if len(out[i].Body) == 0 {
			continue // nil, or empty with no capacity to write through
		}
		k := copy(buf, out[i].Body)
		out[i].Body = buf[:k:k]
		buf = buf[k:]
	}
	return out
}

// Lookup returns a copy of the retained message with the given id, or
// store.ErrNotFound.
func (s *Store) Lookup(ctx context.Context, id string) (store.Message, error) {
	if err := ctx.Err(); err != nil {
		return store.Message{}, err
	}
	l := &s.msgs
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := s.checkClosed(); err != nil {
		return store.Message{}, err
	}
	ref, ok := l.byID[id]
	if !ok {
		return store.Message{}, store.ErrNotFound
	}
	m, ok := ref.log.get(ref.seq)
	if !ok {
		return store.Message{}, store.ErrNotFound
	}
	out := *m
	out.Body = bytes.Clone(out.Body)
	return out, nil
}

// Bounds returns the first and last sequence retained for subject; see
// store.MessageLog.
func (s *Store) Bounds(ctx context.Context, subject string) (first, last uint64, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	l := &s.msgs
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := s.checkClosed(); err != nil {
		return 0, 0, err
	}
	sl := l.subjects[subject]
	if sl == nil {
		return 0, 0, nil
	}
	return sl.first, sl.last(), nil
}

// TrimBefore removes messages of subject with Time before t from the front
// of the log, stopping at the first message at or after t, and returns how
// many it removed. Sequences are never reused: the next Append continues
// after the last message ever appended. A removed message's idempotency
// entry still deduplicates until it expires.
func (s *Store) TrimBefore(ctx context.Context, subject string, t time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	l := &s.msgs
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := s.checkClosed(); err != nil {
		return 0, err
	}
	sl := l.subjects[subject]
	if sl == nil {
		return 0, nil
	}
	k := 0
	for k < len(sl.msgs) && sl.msgs[k].Time.Before(t) {
		k++
	}
	if k == 0 {
		return 0, nil
	}
	for i := range sl.msgs[:k] {
		m := &sl.msgs[i]
		if ref, ok := l.byID[m.ID]; ok && ref.log == sl && ref.seq == m.Seq {
			delete(l.byID, m.ID)
		}
	}
	clear(sl.msgs[:k]) // let the bodies go
	rest := sl.msgs[k:]
	switch {
	case len(rest) == 0:
		rest = nil
	case len(rest) < k:
		// Most of the backing array is dead: move the rest to a fresh one.
		// The copy costs less than the trim did, so trimming stays linear.
		rest = slices.Clone(rest)
	}
	sl.msgs = rest
	sl.first += uint64(k)
	return k, nil
}

// IdempotencyEntries returns how many idempotency entries the store holds,
// expired ones not yet evicted included. It is 0 after Close.
func (s *Store) IdempotencyEntries() int {
	s.msgs.mu.RLock()
	defer s.msgs.mu.RUnlock()
	return len(s.msgs.idem.entries)
}
