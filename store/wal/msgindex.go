package wal

import (
	"hash/maphash"
	"slices"
	"sync"

	"pigeon/internal/hashtab"
	"pigeon/store"
)

// msgIndex is everything Open rebuilds about messages. The id index maps
// a seeded 64-bit hash of the id to the location (idTable, about 20-30
// bytes a message whatever the id's length); a hit is confirmed against
// the record read from disk.
//
// The idempotency index likewise maps the hash of a key to the claiming
// message's location and the claim's expiry (24 bytes a live key, no
// pointers: a string-keyed map cost two or three cache misses a lookup
// once it held a few hundred thousand keys). A claim whose record is not
// yet committed also has its request in pending, by location, and is
// confirmed against the request's key; a committed one is confirmed
// against the record when a duplicate reads it, and a claim that turns out
// to be another key's is skipped (Append retries past it). Keys are kept
// only while live.
type msgIndex struct {
	mu      sync.Mutex
	seed    maphash.Seed
	ids     idTable
	idem    hashtab.Table[idemSlot]
	pending map[uint64]*wreq // location → request, for claims not yet committed
	// kept holds the messages trimmed while their idempotency claims were
	// live, by location, so that a retry within the key's TTL is still
	// answered with the original; a claim's expiry drops it (sweepLocked,
	// or compactKept when the copy leaves the kept log). Up to
	// maxKeptBytes of bodies (keptBytes); beyond the budget a trimmed
	// message's claim goes with it. Each copy is also in the kept log
	// (kept.go), written before the trim truncates, from which Open
	// brings back those still live: a restart forgets none.
	kept      map[uint64]store.Message
	keptBytes int
	clock     int64 // latest message time seen, unix nanoseconds
	sweepAt   int
	hashFn    func(seed maphash.Seed, s string) uint64 // indexHash when opened
}

// maxKeptBytes bounds the bodies of trimmed messages kept for their live
// idempotency keys (msgIndex.kept, and so the live copies of the kept log).
var maxKeptBytes = 64 << 20 // a variable for tests

// indexHash hashes ids and idempotency keys. Tests replace it, before Open,
// to force collisions.
var indexHash = maphash.String

// idemSlot is one claim of an idempotency key.
type idemSlot struct {
	loc uint64
	exp int64 // unix nanoseconds
}

// idemEnt is a claim found for a key: its slot and, while the record is
// not committed, its request.
type idemEnt struct {
	idemSlot
	req *wreq
}

func (x *msgIndex) init() {
	x.seed = maphash.MakeSeed()
	x.idem = hashtab.Table[idemSlot]{}
	x.pending = make(map[uint64]*wreq)
	x.sweepAt = 1024
	x.hashFn = indexHash
}

func (x *msgIndex) hash(id string) uint64 { return x.hashFn(x.seed, id) }

// findClaim returns the live claim of key at time at (unix nanoseconds),
// passing over the locations in skip; mu held. A committed claim is not
// confirmed here: the caller reads its record and compares the key.
func (x *msgIndex) findClaim(key string, at int64, skip []uint64) (idemEnt, bool) {
	var e idemEnt
	i := x.idem.Lookup(x.hash(key), func(v *idemSlot) bool {
		if at >= v.exp || slices.Contains(skip, v.loc) {
			return false
		}
		r := x.pending[v.loc]
		if r != nil && r.key != key {
			return false // another key with the same hash
		}
		e = idemEnt{*v, r}
		return true
	})
	return e, i >= 0
}

// claim records that the message at loc, written by r (nil when already
// committed), holds key until exp; mu held.
func (x *msgIndex) claim(key string, loc uint64, exp int64, r *wreq) {
	x.idem.Insert(x.hash(key), idemSlot{loc: loc, exp: exp})
	if r != nil {
		x.pending[loc] = r
	}
}

// unclaim forgets key's claim by the message at loc, if any; mu held.
func (x *msgIndex) unclaim(key string, loc uint64) {
	delete(x.pending, loc)
	if i := x.idem.Lookup(x.hash(key), func(v *idemSlot) bool { return v.loc == loc }); i >= 0 {
		x.idem.RemoveAt(i)
	}
}

// addID records id at loc; mu held. An empty id is not indexed: no
// Lookup finds it (as in the memory store), and messages without ids,
// all of one hash, would otherwise pile into one probe run that every
// insert walks.
func (x *msgIndex) addID(id string, loc uint64) {
	if id != "" {
		x.ids.Insert(x.hash(id), loc)
	}
}

// removeID forgets id at loc; mu held.
func (x *msgIndex) removeID(id string, loc uint64) {
	if id != "" {
		x.ids.remove(x.hash(id), loc)
	}
}

// findID returns the candidate locations of id, latest first; none for
// the empty id.
func (x *msgIndex) findID(id string) []uint64 {
	if id == "" {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	locs := x.ids.find(x.hash(id))
	slices.Reverse(locs)
	return locs
}

// sweepLocked drops expired claims once the index has doubled.
func (x *msgIndex) sweepLocked() {
	if x.idem.Len() < x.sweepAt {
		return
	}
	x.idem.KeepOnly(func(v *idemSlot) bool {
		if v.exp > x.clock || x.pending[v.loc] != nil {
			return true
		}
		if k, ok := x.kept[v.loc]; ok {
			x.keptBytes -= len(k.Body)
			delete(x.kept, v.loc)
		}
		return false
	})
	x.sweepAt = max(1024, 2*x.idem.Len())
}
