package memory

import (
	"time"

	"pigeon/store"
)

// idempotency holds the live idempotency entries. Its clock is the newest
// message time seen, not the wall clock, so a store fed old timestamps (a
// replay, a test) behaves as it did when they were new.
//
// An entry is the message that claimed a key; its expiry is that message's
// IdemExpires. Every entry has an item in the expiry queue. Replacing an
// entry pushes a new item and leaves the old one, which eviction recognises
// (it names another message) and skips; so the queue holds at most one item
// per Append with a key, and each item is pushed and popped once: O(1) per
// Append while expiries come in order, O(log n) otherwise.
//
// Neither keys nor the queue hold a pointer; only kept does, and only for
// messages trimmed while their key still deduplicates.
type idempotency struct {
	// keys maps each key to the message that claimed it.
	keys index
	// kept holds a copy of each claiming message that retention trimmed
	// from its log while its entry lived, by its location in the log.
	kept   map[msgLoc]store.Message
	expiry expiryQueue
	grace  time.Duration
	newest stamp
	// cutoff is newest less grace: entries that expire at or before it
	// are evicted.
	cutoff stamp
}

func (x *idempotency) init(grace time.Duration) {
	x.keys = newIndex()
	x.grace = grace
	x.newest = stampOf(time.Time{})
	x.cutoff = stampOf(time.Time{}.Add(-grace))
}

// holdsKey tells whether the message at loc, in its log or kept, has the
// idempotency key key.
func (l *messageLog) holdsKey(loc msgLoc, key string) bool {
	sl := l.logs[loc.log]
	if c, j, ok := sl.get(loc.seq); ok {
		return sl.keyIs(c, j, key)
	}
	m, ok := l.idem.kept[loc]
	return ok && m.IdemKey == key
}

// claimKey returns the idempotency key of the message at loc, in its log or
// kept.
func (l *messageLog) claimKey(loc msgLoc) (string, bool) {
	sl := l.logs[loc.log]
	if c, j, ok := sl.get(loc.seq); ok {
		return sl.key(c, j), true
	}
	m, ok := l.idem.kept[loc]
	return m.IdemKey, ok
}

// claim returns a copy of the message holding key, whose hash is h, when
// its entry has not expired at t.
func (l *messageLog) claim(h uint64, key string, t stamp) (store.Message, bool) {
	loc, ok := l.idem.keys.get(h, key, l.holdsKey)
	if !ok {
		return store.Message{}, false
	}
	sl := l.logs[loc.log]
	if c, j, ok := sl.get(loc.seq); ok {
		if !t.before(c.hdrs[j].expiry()) {
			return store.Message{}, false
		}
		return sl.message(c, j, loc.seq, "", key), true
	}
	m := l.idem.kept[loc]
	if !t.before(stampOf(m.IdemExpires)) {
		return store.Message{}, false
	}
	m.Body = append([]byte(nil), m.Body...)
	return m, true
}

// addClaim records that the message m, just stored at loc, holds its key,
// whose hash is h, unless m has none or it is already expired at m.Time,
// which is now; then it advances the clock to now and evicts what expired
// grace before it. Times compare as instants, never by monotonic reading.
func (l *messageLog) addClaim(m *store.Message, h uint64, loc msgLoc, now stamp) {
	x := &l.idem
	if m.IdemKey != "" {
		if expires := stampOf(m.IdemExpires); now.before(expires) {
			if old, ok := x.keys.put(h, m.IdemKey, loc, l.holdsKey); ok && len(x.kept) > 0 {
				delete(x.kept, old)
			}
			x.keys.prepare(&l.spares.running)
			x.expiry.push(newExpiry(expires, h, loc))
		}
	}
	if x.newest.before(now) {
		x.newest = now
		x.cutoff = stampOf(m.Time.Add(-x.grace))
	}
	for {
		e, ok := x.expiry.popDue(x.cutoff)
		if !ok {
			break
		}
		l.dropClaim(e.hash, e.loc())
	}
}

// dropClaim removes the entry of the key whose hash is h when the message
// at loc still holds it.
func (l *messageLog) dropClaim(h uint64, loc msgLoc) {
	x := &l.idem
	dropped := x.keys.dropHashed(h, loc)
	if !dropped && len(x.keys.overflow) > 0 {
		if key, ok := l.claimKey(loc); ok {
			dropped = x.keys.dropString(key, loc)
		}
	}
	if dropped && len(x.kept) > 0 {
		delete(x.kept, loc)
	}
}

// keepClaim copies message j of c, sequence seq of sl, out of the log
// before retention drops it, when its entry still holds its key.
func (l *messageLog) keepClaim(sl *subjectLog, c *chunk, j int, seq uint64) {
	if !c.hasKey(j) {
		return
	}
	x := &l.idem
	loc := msgLoc{log: sl.num, seq: seq}
	if cur, ok := x.keys.hashedLoc(l.hash.parts(sl.scopes.strs[c.hdrs[j].scope], c.bytes(j).rest)); !ok || cur != loc {
		if len(x.keys.overflow) == 0 || x.keys.overflow[sl.key(c, j)] != loc {
			return
		}
	}
	if x.kept == nil {
		x.kept = make(map[msgLoc]store.Message)
	}
	x.kept[loc] = sl.message(c, j, seq, "", "")
}
