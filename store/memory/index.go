package memory

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	"pigeon/internal/hashtab"
)

// msgLoc names one message ever appended: the number of its subject log
// and its sequence there. Sequences start at 1, so the zero msgLoc names
// none.
type msgLoc struct {
	log uint32
	seq uint64
}

// hasher hashes the strings the indexes are keyed by: message ids and
// idempotency keys. Its seed is the store's own, so what one store's
// clients choose cannot collide on purpose in another.
type hasher struct {
	seed maphash.Seed
	// mask is ANDed into every hash: all ones, except in tests that force
	// collisions.
	mask uint64
}

func newHasher() hasher { return hasher{seed: maphash.MakeSeed(), mask: ^uint64(0)} }

func (h *hasher) string(s string) uint64 { return maphash.String(h.seed, s) & h.mask }

// bytes is string for the same bytes held as a slice.
func (h *hasher) bytes(b []byte) uint64 { return maphash.Bytes(h.seed, b) & h.mask }

// parts is string for the string a followed by b.
func (h *hasher) parts(a string, b []byte) uint64 {
	var x maphash.Hash
	x.SetSeed(h.seed)
	x.WriteString(a)
	x.Write(b)
	return x.Sum64() & h.mask
}

// index maps strings (the ids, or the idempotency keys) to the message that
// holds each. It is keyed by a 64-bit hash of the string rather than the
// string, and holds no pointer, so it is cheap to grow and the garbage
// collector never scans it. Two strings may share a hash: every hit is
// checked against the string the message holds, and a string whose hash is
// taken by another one goes into overflow, keyed by the string itself, as
// does one whose location does not pack into byHash's word (packedLoc).
// Overflow is almost always empty; correctness does not depend on it being
// so.
//
// A string is in byHash or overflow, never both. holds(loc, s) tells
// whether the message at loc holds s, for every loc the index holds: an
// index must be kept free of locations of messages that are gone.
type index struct {
	byHash   hashtab.Table[packedLoc] // at most one slot per hash
	overflow map[string]msgLoc
	// next is the table byHash grows into next while it is made (prepare),
	// nil otherwise.
	next *spareTable
}

func newIndex() index { return index{} }

func (x *index) len() int { return x.byHash.Len() + len(x.overflow) }

func anyLoc(*packedLoc) bool { return true }

// packedLoc is a msgLoc in one word, as byHash holds it (a slot of 16
// bytes rather than 24): the log's number in the bits above seqBits, the
// sequence in those below. A location that does not fit, in a store of
// more than 2^24 subjects or a subject past 2^40 messages, is indexed in
// overflow by its string, as a string whose hash is taken is.
type packedLoc uint64

const seqBits = 40

// pack returns loc packed, and whether it fits.
func pack(loc msgLoc) (packedLoc, bool) {
	if loc.log >= 1<<(64-seqBits) || loc.seq >= 1<<seqBits {
		return 0, false
	}
	return packedLoc(uint64(loc.log)<<seqBits | loc.seq), true
}

func (p packedLoc) loc() msgLoc {
	return msgLoc{log: uint32(p >> seqBits), seq: uint64(p) & (1<<seqBits - 1)}
}

// hashed returns the slot of hash h, or -1.
func (x *index) hashed(h uint64) int { return x.byHash.Lookup(h, anyLoc) }

// hashedLoc returns the message whose string has hash h in byHash.
func (x *index) hashedLoc(h uint64) (msgLoc, bool) {
	if i := x.hashed(h); i >= 0 {
		return x.byHash.At(i).loc(), true
	}
	return msgLoc{}, false
}

// get returns the message holding s, whose hash is h.
func (x *index) get(h uint64, s string, holds func(msgLoc, string) bool) (msgLoc, bool) {
	if loc, ok := x.hashedLoc(h); ok && holds(loc, s) {
		return loc, true
	}
	if len(x.overflow) == 0 {
		return msgLoc{}, false
	}
	loc, ok := x.overflow[s]
	return loc, ok
}

// put makes loc the message holding s, whose hash is h, and returns the
// one that held it before, if any. It probes byHash once: the hash's slot
// when it is taken, or the one loc goes into.
func (x *index) put(h uint64, s string, loc msgLoc, holds func(msgLoc, string) bool) (old msgLoc, replaced bool) {
	p, fits := pack(loc)
	if !fits {
		return x.putOverflow(h, s, loc, holds)
	}
	i, taken := x.byHash.FindOrInsert(h, p)
	if !taken {
		// s may have gone to overflow while another string had the hash.
		if len(x.overflow) > 0 {
			if old, replaced = x.overflow[s]; replaced {
				delete(x.overflow, s)
			}
		}
		return old, replaced
	}
	cur := x.byHash.At(i).loc()
	if !holds(cur, s) {
		// The hash is another string's: s goes to overflow.
		if x.overflow == nil {
			x.overflow = make(map[string]msgLoc)
		}
		old, replaced = x.overflow[s]
		x.overflow[s] = loc
		return old, replaced
	}
	*x.byHash.At(i) = p
	return cur, true
}

// putOverflow is put for a loc that byHash cannot hold: s leaves byHash,
// when it is there, for overflow.
func (x *index) putOverflow(h uint64, s string, loc msgLoc, holds func(msgLoc, string) bool) (old msgLoc, replaced bool) {
	if i := x.hashed(h); i >= 0 {
		if cur := x.byHash.At(i).loc(); holds(cur, s) {
			x.byHash.RemoveAt(i)
			old, replaced = cur, true
		}
	}
	if x.overflow == nil {
		x.overflow = make(map[string]msgLoc)
	}
	if cur, ok := x.overflow[s]; ok {
		old, replaced = cur, true
	}
	x.overflow[s] = loc
	return old, replaced
}

// prepare has the table byHash next grows into made beside the appends
// once byHash is close to growing (hashtab.Table.SpareWanted), on a
// goroutine of its own that running counts, and hands it over once made.
// Call it with the log's lock held, after a put.
func (x *index) prepare(running *sync.WaitGroup) {
	if x.next != nil {
		if sp := x.next.ready.Load(); sp != nil {
			x.byHash.SetSpare(sp)
			x.next = nil
		}
		return
	}
	n := x.byHash.SpareWanted()
	if n == 0 {
		return
	}
	next := new(spareTable)
	x.next = next
	running.Add(1)
	go func() {
		defer running.Done()
		next.ready.Store(hashtab.NewSpare[packedLoc](n))
	}()
}

// spareTable is a table being made for an index to grow into.
type spareTable struct {
	ready atomic.Pointer[hashtab.Spare[packedLoc]] // nil until made
}

// dropHashed removes the string whose hash is h when loc holds it there, and
// tells whether it did. A string in overflow needs dropString.
func (x *index) dropHashed(h uint64, loc msgLoc) bool {
	p, fits := pack(loc)
	if !fits {
		return false
	}
	if i := x.hashed(h); i >= 0 && *x.byHash.At(i) == p {
		x.byHash.RemoveAt(i)
		return true
	}
	return false
}

// dropString removes s from overflow when loc holds it there, and tells
// whether it did.
func (x *index) dropString(s string, loc msgLoc) bool {
	if cur, ok := x.overflow[s]; ok && cur == loc {
		delete(x.overflow, s)
		return true
	}
	return false
}
