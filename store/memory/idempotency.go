package memory

import (
	"time"

	"pigeon/store"
)

// idempotency holds the live idempotency entries. Its clock is the newest
// message time seen, not the wall clock, so a store fed old timestamps (a
// replay, a test) behaves as it did when they were new.
//
// Every entry has an item in the expiry heap. Replacing an entry pushes a new
// item and leaves the old one, which eviction recognises and skips; so the
// heap holds at most one item per Append with a key, and each item is pushed
// and popped once: O(log n) per Append.
type idempotency struct {
	// entries maps a key to the message that claimed it: a reference into
	// the log, or a kept copy once retention trimmed it from the log.
	entries map[string]idemEntry
	expiry  expiryHeap
	newest  time.Time
}

// idemEntry is small so that the map stays cheap to grow.
type idemEntry struct {
	log     *subjectLog
	seq     uint64
	expires time.Time
	kept    *store.Message
}

func (e *idemEntry) message() (store.Message, bool) {
	if e.kept != nil {
		return *e.kept, true
	}
	if m, ok := e.log.get(e.seq); ok {
		return *m, true
	}
	return store.Message{}, false
}

func (x *idempotency) init() {
	x.entries = make(map[string]idemEntry)
}

// find returns the message holding key when its entry has not expired at t.
func (x *idempotency) find(key string, t time.Time) (store.Message, bool) {
	if key == "" {
		return store.Message{}, false
	}
	e, ok := x.entries[key]
	if !ok || !e.expires.After(t) {
		return store.Message{}, false
	}
	return e.message()
}

// keep copies m out of the log before retention drops it, when m still
// holds its idempotency key.
func (x *idempotency) keep(m *store.Message) {
	if m.IdemKey == "" {
		return
	}
	if e, ok := x.entries[m.IdemKey]; ok && e.kept == nil && e.seq == m.Seq && e.log.first <= m.Seq {
		c := *m
		e.kept = &c
		x.entries[m.IdemKey] = e
	}
}

// add records m's key, unless m has none or it is already expired at m.Time,
// advances the clock to m.Time and evicts what expired grace before it.
func (x *idempotency) add(m *store.Message, sl *subjectLog, grace time.Duration) {
	if m.IdemKey != "" && m.IdemExpires.After(m.Time) {
		x.entries[m.IdemKey] = idemEntry{log: sl, seq: m.Seq, expires: m.IdemExpires}
		x.expiry.push(expiry{at: m.IdemExpires, key: m.IdemKey})
	}
	if m.Time.After(x.newest) {
		x.newest = m.Time
	}
	x.evict(x.newest.Add(-grace))
}

// evict drops the entries that expire at or before cutoff.
func (x *idempotency) evict(cutoff time.Time) {
	for len(x.expiry) > 0 && !x.expiry[0].at.After(cutoff) {
		e := x.expiry.pop()
		// The key may since have been claimed again with a later expiry.
		if cur, ok := x.entries[e.key]; ok && !cur.expires.After(cutoff) {
			delete(x.entries, e.key)
		}
	}
}

type expiry struct {
	at  time.Time
	key string
}

// expiryHeap is a binary min-heap on at. It is written out rather than built
// on container/heap to keep items out of interfaces: no allocation per push.
type expiryHeap []expiry

func (h *expiryHeap) push(e expiry) {
	*h = append(*h, e)
	q := *h
	i := len(q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q[i].at.Before(q[p].at) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *expiryHeap) pop() expiry {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q[n] = expiry{} // drop the key string
	q = q[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && q[r].at.Before(q[l].at) {
			c = r
		}
		if !q[c].at.Before(q[i].at) {
			break
		}
		q[i], q[c] = q[c], q[i]
		i = c
	}
	*h = q
	return top
}
