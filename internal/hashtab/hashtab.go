// Package hashtab is a multi-map from 64-bit hashes to small values, for
// indexes that hold millions of entries: open addressing with linear
// probing, kept between 40% and 80% full (it doubles when it grows, so
// each value is moved once on average), each slot the hash and the value
// side by side, so a lookup usually costs one cache miss where a Go map
// costs two or three. When V holds no pointers the garbage collector has
// nothing in the table to scan.
//
// A table grows incrementally: the values of the old table move to the new
// one a few slots at a time, with each insert, so that no insert waits for
// millions of values to move (a table of 3 million moved at once took
// about 130 ms). Until they have all moved, a lookup looks in both.
//
// Values whose hashes are equal (two keys colliding, or one key stored
// twice) each get a slot; a lookup visits every candidate and the caller
// confirms the one it wants against the key it hashed.
//
// A Table is not safe for concurrent use; Lookup, At, Touch and Len do
// not change it, so they may run concurrently with each other. The zero
// Table is empty and ready to use.
package hashtab

import "math/bits"

// Table is the multi-map. See the package doc.
type Table[V any] struct {
	slots []slot[V]
	n     int // values in slots

	// While the table grows: the table its values are moving from. Its
	// slots before moved have moved (they stay, so that probes still run
	// through them, but hold nothing); removed values in the rest are
	// tombstones. oldN is how many values it still holds.
	old   []slot[V]
	moved int
	oldN  int
}

type slot[V any] struct {
	h uint64 // empty or tombstone (only in old) below minHash
	v V
}

const (
	empty     = 0
	tombstone = 1
	minHash   = 2 // fix keeps hashes at or above it
)

// minSlots is the size of a table's first allocation.
const minSlots = 1024

// moveStep is how many slots of the old table each insert moves: the old
// table holds at most 80% of its slots, the new one has twice as many, so
// the move ends long before the new table could fill.
const moveStep = 8

// fix keeps hashes off the markers of empty slots and tombstones.
func fix(h uint64) uint64 {
	if h < minHash {
		return h + minHash
	}
	return h
}

// home is the slot a hash starts probing from in slots (multiply-shift
// range reduction, so the size need not be a power of two).
func home[V any](slots []slot[V], h uint64) int {
	hi, _ := bits.Mul64(h, uint64(len(slots)))
	return int(hi)
}

func next[V any](slots []slot[V], i int) int {
	if i++; i == len(slots) {
		return 0
	}
	return i
}

// Len returns how many values the table holds.
func (t *Table[V]) Len() int { return t.n + t.oldN }

// Cap returns how many slots the table has (the new table's, while it
// grows).
func (t *Table[V]) Cap() int { return len(t.slots) }

// Insert adds v under h, beside any values already there.
func (t *Table[V]) Insert(h uint64, v V) {
	h = fix(h)
	if t.old != nil {
		t.move(moveStep)
	}
	if (t.n+t.oldN+1)*5 > len(t.slots)*4 {
		t.grow()
	}
	put(t.slots, h, v)
	t.n++
}

// put stores v under h in the first free slot of its probe in slots.
func put[V any](slots []slot[V], h uint64, v V) {
	i := home(slots, h)
	for slots[i].h != empty {
		i = next(slots, i)
	}
	slots[i] = slot[V]{h, v}
}

// Reserve sizes an empty table for n values at 70% load.
func (t *Table[V]) Reserve(n int) {
	if t.Len() == 0 && n*10/7 > len(t.slots) {
		*t = Table[V]{slots: make([]slot[V], max(minSlots, n*10/7))}
	}
}

// grow starts moving the values to a table twice the size, finishing any
// move still running first (which the bounds above make rare).
func (t *Table[V]) grow() {
	if t.old != nil {
		t.move(len(t.old))
	}
	if t.n == 0 {
		t.slots = make([]slot[V], max(minSlots, len(t.slots)*2))
		return
	}
	t.old, t.moved, t.oldN = t.slots, 0, t.n
	t.slots, t.n = make([]slot[V], max(minSlots, len(t.slots)*2)), 0
}

// move moves up to k slots of the old table, and drops it once all have
// moved.
func (t *Table[V]) move(k int) {
	end := min(t.moved+k, len(t.old))
	for i := t.moved; i < end; i++ {
		if s := t.old[i]; s.h >= minHash {
			put(t.slots, s.h, s.v)
			t.n++
			t.oldN--
		}
	}
	t.moved = end
	if t.moved == len(t.old) {
		t.old, t.moved = nil, 0
	}
}

// Lookup calls match with each value stored under h, in no particular
// order, until match returns true, and returns that value's slot; -1 when
// none matched. The slot is valid until the table next changes.
func (t *Table[V]) Lookup(h uint64, match func(v *V) bool) int {
	if t.Len() == 0 {
		return -1
	}
	h = fix(h)
	if t.n > 0 {
		for i := home(t.slots, h); t.slots[i].h != empty; i = next(t.slots, i) {
			if t.slots[i].h == h && match(&t.slots[i].v) {
				return i
			}
		}
	}
	if t.oldN > 0 {
		// Slots before moved have moved: the probe runs through them.
		for i := home(t.old, h); t.old[i].h != empty; i = next(t.old, i) {
			if i >= t.moved && t.old[i].h == h && match(&t.old[i].v) {
				return len(t.slots) + i
			}
		}
	}
	return -1
}

// At returns the value in slot i, as Lookup returned it.
func (t *Table[V]) At(i int) *V {
	if i >= len(t.slots) {
		return &t.old[i-len(t.slots)].v
	}
	return &t.slots[i].v
}

// Touch reads the slot where a lookup of h starts and returns its hash,
// so that a lookup or insert of h soon after finds it in cache: called
// before an unrelated lookup, it lets the two cache misses overlap.
func (t *Table[V]) Touch(h uint64) uint64 {
	if len(t.slots) == 0 {
		return 0
	}
	return t.slots[home(t.slots, fix(h))].h
}

// RemoveAt empties slot i. In the new table it shifts the rest of its
// cluster back so that no probe sequence is broken; in the old one it
// leaves a tombstone, which probes run through, and which is dropped with
// the old table.
func (t *Table[V]) RemoveAt(i int) {
	if i >= len(t.slots) {
		t.old[i-len(t.slots)] = slot[V]{h: tombstone}
		t.oldN--
		return
	}
	s := t.slots
	for j := next(s, i); s[j].h != empty; j = next(s, j) {
		k := home(s, s[j].h)
		// The entry at j may move to the hole at i unless its home lies
		// cyclically in (i, j].
		if i <= j && i < k && k <= j || i > j && (i < k || k <= j) {
			continue
		}
		s[i] = s[j]
		i = j
	}
	s[i] = slot[V]{}
	t.n--
}

// KeepOnly removes every value for which keep returns false, rebuilding
// the table in one pass.
func (t *Table[V]) KeepOnly(keep func(v *V) bool) {
	if t.old != nil {
		t.move(len(t.old))
	}
	old := t.slots
	*t = Table[V]{}
	n := 0
	for i := range old {
		if old[i].h >= minHash && keep(&old[i].v) {
			n++
		}
	}
	t.Reserve(n)
	for i := range old {
		if old[i].h >= minHash && keep(&old[i].v) {
			t.Insert(old[i].h, old[i].v)
		}
	}
}
