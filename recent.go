package pigeon

import (
	"sync"
	"sync/atomic"

	"pigeon/store"
)

// recentSize is how many decoded messages per subject the engine keeps so
// that the fan-out, lagging subscribers and receivers decode a message once
// rather than once each.
const recentSize = 4096

// decoded is a stored message decoded once; it is shared and never
// mutated. Its data is decoded when a reader first needs it (a selector, a
// receive scope, a filter, a gate): a subscriber that takes everything
// never pays for it.
type decoded struct {
	seq  uint64
	m    *Message
	once sync.Once
	data any
	// enc is m's JSON encoding, made once for every transport that sends
	// it (encOnce).
	encOnce sync.Once
	enc     []byte
}

// json is m's encoding (Message.AppendJSON), made once; callers must not
// modify it.
func (d *decoded) json() []byte {
	d.encOnce.Do(func() { d.enc = d.m.AppendJSON(make([]byte, 0, 384+len(d.m.Data))) })
	return d.enc
}

// value is the message's data, decoded.
func (d *decoded) value() any {
	d.once.Do(func() { d.data, _ = decodeValue(d.m.Data) })
	return d.data
}

// newDecoded is the decoded form of m, whose data the gates decoded.
func newDecoded(seq uint64, m *Message, data any) *decoded {
	d := &decoded{seq: seq, m: m}
	d.once.Do(func() { d.data = data })
	return d
}

type recentRing struct {
	slots [recentSize]atomic.Pointer[decoded]
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

// remember keeps an accepted message's decoded form, as the gates judged
// it, so that the fan-out hands it to subscribers without reading and
// decoding it again. m and data must not be shared with the publisher.
func (e *Engine) remember(subject string, seq uint64, m *Message, data any) {
	e.recent.ring(subject).slots[seq%recentSize].Store(newDecoded(seq, m, data))
}

// recentAt returns the decoded message of subject at seq when the cache
// holds it.
func (e *Engine) recentAt(subject string, seq uint64) *decoded {
	if d := e.recent.ring(subject).slots[seq%recentSize].Load(); d != nil && d.seq == seq {
		return d
	}
	return nil
}

// decode returns the decoded form of sm, from the cache when it is there.
// The returned message and data are shared: callers must not mutate them.
func (e *Engine) decode(sm store.Message) (*decoded, error) {
	r := e.recent.ring(sm.Subject)
	slot := &r.slots[sm.Seq%recentSize]
	if d := slot.Load(); d != nil && d.seq == sm.Seq && d.m.ID == sm.ID {
		return d, nil
	}
	m, err := decodeStored(sm)
	if err != nil {
		return nil, err
	}
	d := &decoded{seq: sm.Seq, m: m}
	slot.Store(d)
	return d, nil
}
