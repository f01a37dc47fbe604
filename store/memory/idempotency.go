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
	// entries maps a key to the message that claimed it. Its Body is shared
	// with the log; both treat it as immutable.
	entries map[string]store.Message
	expiry  expiryHeap
	newest  time.Time
}

func (x *idempotency) init() {
	x.entries = make(map[string]store.Message)
}

// find returns the message holding key when its entry has not expired at t.
func (x *idempotency) find(key string, t time.Time) (store.Message, bool) {
	if key == "" {
		return store.Message{}, false
	}
	m, ok := x.entries[key]
	if !ok || !m.IdemExpires.After(t) {
		return store.Message{}, false
	}
	return m, true
}

// add records m's key, unless m has none or it is already expired at m.Time,
// advances the clock to m.Time and evicts what expired grace before it.
func (x *idempotency) add(m *store.Message, grace time.Duration) {
	if m.IdemKey != "" && m.IdemExpires.After(m.Time) {
		x.entries[m.IdemKey] = *m
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
		if cur, ok := x.entries[e.key]; ok && !cur.IdemExpires.After(cutoff) {
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
