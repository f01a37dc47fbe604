package pigeon

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"pigeon/internal/jsontext"
	"pigeon/store"
)

// recentSize is how many decoded messages per subject the engine keeps so
// that the fan-out, lagging subscribers and receivers decode a message once
// rather than once each; recentBytes bounds their size (decoded.size), so
// that large messages cannot make the cache hold recentSize of them.
// A subject's cache is emptied once nothing was put in it for recentIdle
// (the engine's janitor looks every Options.SweepInterval), so that quiet
// subjects hold no memory.
const (
	recentSize  = 4096
	recentBytes = 32 << 20
	recentIdle  = time.Minute
)

// decoded is a stored message decoded once; it is shared and never
// mutated. Its data is decoded when a reader first needs it (a selector, a
// receive scope, a filter, a gate): a subscriber that takes everything
// never pays for it.
type decoded struct {
	seq  uint64
	m    *Message
	msg  Message // m, for a message the engine copied in (remember)
	once sync.Once
	data any
	// exact reports that every number in data is exact
	// (jsontext.Document.Exact), once value has run.
	exact bool
	// enc is m's JSON encoding, made once for every transport that sends
	// it (encOnce).
	encOnce sync.Once
	enc     []byte
	// size is about what the message takes in memory, its data decoded
	// and encoded included: what the cache and the subscribers' queues
	// count against their bounds.
	size int64
}

// sizeOf is decoded.size for m.
func sizeOf(m *Message) int64 { return int64(m.sizeHint()) + 2*int64(len(m.Data)) }

// json is m's encoding (Message.AppendJSON), made once; callers must not
// modify it.
func (d *decoded) json() []byte {
	d.encOnce.Do(func() { d.enc = d.m.AppendJSON(make([]byte, 0, d.m.sizeHint())) })
	return d.enc
}

// value is the message's data, decoded.
func (d *decoded) value() any {
	d.once.Do(func() {
		if doc, err := jsontext.DecodeDocument(d.m.Data, MaxJSONDepth, nil); err == nil {
			d.data, d.exact = doc.Value, doc.Exact
		}
	})
	return d.data
}

// condValue is what conditions see of m's data (condData).
func (d *decoded) condValue() any {
	v := d.value()
	return condData(v, d.m.Data, d.exact)
}

// recentRing is one subject's cache: the message of sequence seq sits in
// slot seq%recentSize, read without a lock; put keeps the slots' sizes
// within recentBytes, clearing the oldest.
type recentRing struct {
	slots [recentSize]atomic.Pointer[decoded]
	// floor is the first sequence the cache may hold (forget): those
	// before it are gone from the store, trimmed by retention or a purge,
	// and no reader gets them from here.
	floor atomic.Uint64

	mu    sync.Mutex
	sizes [recentSize]int64 // the size of the message in each slot, kept here to spare reading it
	bytes int64             // their sum
	tail  uint64            // no slot holds a sequence before it
	last  time.Time         // when put was last called
}

// put caches d in its slot at now, in place of what the slot held, and
// clears the oldest slots while the cache holds more than recentBytes (d
// stays, whatever its size).
func (r *recentRing) put(d *decoded, now time.Time) {
	i := d.seq % recentSize
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = now
	if d.seq < r.floor.Load() { // read from the store as it was trimmed
		return
	}
	r.slots[i].Store(d)
	r.bytes += d.size - r.sizes[i]
	r.sizes[i] = d.size
	if d.seq >= recentSize {
		r.tail = max(r.tail, d.seq-recentSize+1)
	}
	for r.bytes > recentBytes && r.tail < d.seq {
		j := r.tail % recentSize
		if old := r.slots[j].Load(); old != nil && old.seq == r.tail {
			r.slots[j].Store(nil)
			r.bytes -= r.sizes[j]
			r.sizes[j] = 0
		}
		r.tail++
	}
}

// forget drops the messages before sequence first and keeps them out from
// then on: the store no longer holds them. It looks at every slot (a
// message put out of order may sit before tail), once per raise of the
// floor.
func (r *recentRing) forget(first uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if first <= r.floor.Load() {
		return
	}
	r.floor.Store(first) // before the slots empty: a reader checks it after its load
	for j := range r.slots {
		if old := r.slots[j].Load(); old != nil && old.seq < first {
			r.slots[j].Store(nil)
			r.bytes -= r.sizes[j]
			r.sizes[j] = 0
		}
	}
	r.tail = max(r.tail, first)
}

// clearIdle empties the cache when nothing was put in it since cutoff.
func (r *recentRing) clearIdle(cutoff time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bytes == 0 || !r.last.Before(cutoff) {
		return
	}
	for i := range r.slots {
		if r.sizes[i] != 0 || r.slots[i].Load() != nil {
			r.slots[i].Store(nil)
			r.sizes[i] = 0
		}
	}
	r.bytes = 0
}

type recentCache struct {
	mu    sync.RWMutex
	rings map[string]*recentRing
}

func (c *recentCache) ring(subject string) *recentRing {
	c.mu.RLock()
	r := c.rings[subject]
	c.mu.RUnlock()
	if r != nil {
		return r
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rings == nil {
		c.rings = map[string]*recentRing{}
	}
	if r = c.rings[subject]; r == nil {
		r = new(recentRing)
		c.rings[subject] = r
	}
	return r
}

// forget drops from subject's cache the messages before sequence first,
// which retention or a purge removed from the store, so that no reader
// (a subscription started at an older sequence, one lagging behind the
// trim) is handed them; it keeps them out from then on. A subject with no
// cache gets none.
func (c *recentCache) forget(subject string, first uint64) {
	c.mu.RLock()
	r := c.rings[subject]
	c.mu.RUnlock()
	if r != nil {
		r.forget(first)
	}
}

// sweep empties the caches of the subjects nothing was put in since
// cutoff.
func (c *recentCache) sweep(cutoff time.Time) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, r := range c.rings {
		r.clearIdle(cutoff)
	}
}

// remember keeps a copy of an accepted message in d (zero, and not yet
// shared), put in r, its subject's cache, and, when built (hasData), the
// data tree the gates judged, so that the fan-out hands it to subscribers
// without reading and decoding it again; otherwise the first reader
// decodes it (value). The copy shares nothing with m: its data is judged,
// the text the gates judged, which nothing else holds, or when judged is
// nil a copy of m's (stored as "{}" when empty). data must not be shared
// with the publisher; exact is what its decoder found of its numbers
// (jsontext.Document.Exact).
func (e *Engine) remember(d *decoded, r *recentRing, seq uint64, m *Message, judged json.RawMessage, data any, hasData, exact bool, now time.Time) *decoded {
	// d is zero: its fields are written in place, with no zeroed
	// decoded built first and copied over it.
	d.seq, d.msg = seq, *m
	d.m = &d.msg
	switch {
	case judged != nil:
		d.msg.Data = judged
	case len(m.Data) == 0:
		d.msg.Data = json.RawMessage("{}") // as stored
	default:
		d.msg.Data = append(json.RawMessage(nil), m.Data...)
	}
	if m.Signature != nil {
		sig := *m.Signature
		d.msg.Signature = &sig
	}
	if hasData {
		d.once.Do(func() { d.data, d.exact = data, exact })
	}
	d.size = sizeOf(&d.msg)
	r.put(d, now)
	return d
}

// recentAt returns the decoded message of subject at seq when the cache
// holds it.
func (e *Engine) recentAt(subject string, seq uint64) *decoded {
	return e.recent.ring(subject).at(seq)
}

// at returns the decoded message at seq when the ring holds it.
func (r *recentRing) at(seq uint64) *decoded {
	if d := r.slots[seq%recentSize].Load(); d != nil && d.seq == seq && seq >= r.floor.Load() {
		return d
	}
	return nil
}

// decode returns the decoded form of sm, from the cache when it is there.
// The returned message and data are shared: callers must not mutate them.
func (e *Engine) decode(sm store.Message) (*decoded, error) {
	r := e.recent.ring(sm.Subject)
	slot := &r.slots[sm.Seq%recentSize]
	if d := slot.Load(); d != nil && d.seq == sm.Seq && d.m.ID == sm.ID && sm.Seq >= r.floor.Load() {
		return d, nil
	}
	m, err := decodeStored(sm)
	if err != nil {
		return nil, err
	}
	d := &decoded{seq: sm.Seq, m: m, size: sizeOf(m)}
	r.put(d, e.now())
	return d, nil
}
