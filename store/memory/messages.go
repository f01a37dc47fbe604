package memory

import (
	"bytes"
	"context"
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

// chunkLen is how many messages a full chunk of a subject log holds
// (128 KiB of message headers; bodies are separate).
const chunkLen = 1024

// subjectLog is one subject's retained messages, in chunks. Every chunk but
// the last holds chunkLen messages, counting the trimmed slots at the front
// of the first; so the i-th retained message is at position head+i, found in
// O(1). A full chunk is never copied again: Append does not move old
// messages, and trimming frees whole chunks.
type subjectLog struct {
	chunks [][]store.Message
	// head is the index in chunks[0] of the first retained message.
	head int
	// n is how many messages are retained.
	n int
	// first is the sequence of the first retained message; when none is
	// retained it is the next sequence Append assigns.
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
func (sl *subjectLog) last() uint64 { return sl.first + uint64(sl.n) - 1 }

// at returns the i-th retained message, 0 <= i < n.
func (sl *subjectLog) at(i int) *store.Message {
	p := sl.head + i
	return &sl.chunks[p/chunkLen][p%chunkLen]
}

// get returns the retained message with sequence seq.
func (sl *subjectLog) get(seq uint64) (*store.Message, bool) {
	if seq < sl.first || seq-sl.first >= uint64(sl.n) {
		return nil, false
	}
	return sl.at(int(seq - sl.first)), true
}

// push appends m, whose Seq is last()+1.
func (sl *subjectLog) push(m *store.Message) {
	last := len(sl.chunks) - 1
	if last < 0 || len(sl.chunks[last]) == chunkLen {
		var c []store.Message
		if last >= 0 {
			// The subject filled a chunk: give it full ones from now on.
			// A first chunk grows by append, so a quiet subject stays small.
			c = make([]store.Message, 0, chunkLen)
		}
		sl.chunks = append(sl.chunks, c)
		last++
	}
	sl.chunks[last] = append(sl.chunks[last], *m)
	sl.n++
}

// window copies up to limit (no limit when limit <= 0) retained messages
// with Seq >= from, and their bodies; see copyBodies.
func (sl *subjectLog) window(from uint64, limit int) []store.Message {
	from = max(from, sl.first)
	if from-sl.first >= uint64(sl.n) {
		return nil
	}
	i := int(from - sl.first)
	n := sl.n - i
	if limit > 0 && limit < n {
		n = limit
	}
	out := make([]store.Message, n)
	for done := 0; done < n; {
		p := sl.head + i + done
		done += copy(out[done:], sl.chunks[p/chunkLen][p%chunkLen:])
	}
	copyBodies(out)
	return out
}

// dropFront removes the first k retained messages, calling gone for each
// before it goes.
func (sl *subjectLog) dropFront(k int, gone func(*store.Message)) {
	for k > 0 {
		c := sl.chunks[0]
		end := min(len(c), sl.head+k)
		for i := sl.head; i < end; i++ {
			gone(&c[i])
		}
		clear(c[sl.head:end]) // let the bodies go
		dropped := end - sl.head
		k -= dropped
		sl.n -= dropped
		sl.first += uint64(dropped)
		sl.head = end
		if sl.head == chunkLen || sl.n == 0 {
			sl.chunks[0] = nil
			sl.chunks = sl.chunks[1:]
			sl.head = 0
		}
	}
	if len(sl.chunks) == 0 {
		sl.chunks = nil
	}
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
	m.Seq = sl.last() + 1
	sl.push(&m)
	if m.ID != "" {
		l.byID[m.ID] = msgRef{log: sl, seq: m.Seq}
	}
	l.idem.add(&m, sl, s.opts.IdempotencyGrace)
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
	return sl.window(from, max), nil
}

// copyBodies replaces the bodies of out by copies, all in one buffer. Each
// copy is capped at its length, so appending to one cannot overwrite the
// next.
func copyBodies(out []store.Message) {
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
	for k < sl.n && sl.at(k).Time.Before(t) {
		k++
	}
	sl.dropFront(k, func(m *store.Message) {
		l.idem.keep(m)
		if ref, ok := l.byID[m.ID]; ok && ref.log == sl && ref.seq == m.Seq {
			delete(l.byID, m.ID)
		}
	})
	return k, nil
}

// IdempotencyEntries returns how many idempotency entries the store holds,
// expired ones not yet evicted included. It is 0 after Close.
func (s *Store) IdempotencyEntries() int {
	s.msgs.mu.RLock()
	defer s.msgs.mu.RUnlock()
	return len(s.msgs.idem.entries)
}
