// Package hashtab is a multi-map from 64-bit hashes to small values, for
// indexes that hold millions of entries: open addressing with linear
// probing, kept between 40% and 80% full (it doubles when it grows, so
// each value is moved once on average), each slot the hash and the value
// side by side, so a lookup usually costs one cache miss where a Go map
// costs two or three. When V holds no pointers the garbage collector has
// nothing in the table to scan.
//
// Values whose hashes are equal (two keys colliding, or one key stored
// twice) each get a slot; a lookup visits every candidate and the caller
// confirms the one it wants against the key it hashed.
//
// A Table is not safe for concurrent use. The zero Table is empty and
// ready to use.
package hashtab

import "math/bits"

// Table is the multi-map. See the package doc.
type Table[V any] struct {
	slots []slot[V]
	n     int
}

type slot[V any] struct {
	h uint64 // 0 marks an empty slot
	v V
}

// minSlots is the size of a table's first allocation.
const minSlots = 1024

// fix keeps hashes off 0, which marks an empty slot.
func fix(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

// home is the slot a hash starts probing from (multiply-shift range
// reduction, so the size need not be a power of two).
func (t *Table[V]) home(h uint64) int {
	hi, _ := bits.Mul64(h, uint64(len(t.slots)))
	return int(hi)
}

func (t *Table[V]) next(i int) int {
	if i++; i == len(t.slots) {
		return 0
	}
	return i
}

// Len returns how many values the table holds.
func (t *Table[V]) Len() int { return t.n }

// Cap returns how many slots the table has.
func (t *Table[V]) Cap() int { return len(t.slots) }

// Insert adds v under h, beside any values already there.
func (t *Table[V]) Insert(h uint64, v V) {
	h = fix(h)
	if (t.n+1)*5 > len(t.slots)*4 {
		t.grow()
	}
	i := t.home(h)
	for t.slots[i].h != 0 {
		i = t.next(i)
	}
	t.slots[i] = slot[V]{h, v}
	t.n++
}

// Reserve sizes an empty table for n values at 70% load.
func (t *Table[V]) Reserve(n int) {
	if t.n == 0 && n*10/7 > len(t.slots) {
		t.slots = make([]slot[V], max(minSlots, n*10/7))
	}
}

func (t *Table[V]) grow() {
	old := t.slots
	t.slots = make([]slot[V], max(minSlots, len(old)*2))
	t.n = 0
	for _, s := range old {
		if s.h != 0 {
			i := t.home(s.h)
			for t.slots[i].h != 0 {
				i = t.next(i)
			}
			t.slots[i] = s
			t.n++
		}
	}
}

// Lookup calls match with each value stored under h, in no particular
// order, until match returns true, and returns that value's slot; -1 when
// none matched. The slot is valid until the table next changes.
func (t *Table[V]) Lookup(h uint64, match func(v *V) bool) int {
	if t.n == 0 {
		return -1
	}
	h = fix(h)
	for i := t.home(h); t.slots[i].h != 0; i = t.next(i) {
		if t.slots[i].h == h && match(&t.slots[i].v) {
			return i
		}
	}
	return -1
}

// At returns the value in slot i, as Lookup returned it.
func (t *Table[V]) At(i int) *V { return &t.slots[i].v }

// Touch reads the slot where a lookup of h starts and returns its hash,
// so that a lookup or insert of h soon after finds it in cache: called
// before an unrelated lookup, it lets the two cache misses overlap.
func (t *Table[V]) Touch(h uint64) uint64 {
	if len(t.slots) == 0 {
		return 0
	}
	return t.slots[t.home(fix(h))].h
}

// RemoveAt empties slot i, shifting the rest of its cluster back so that
// no probe sequence is broken.
func (t *Table[V]) RemoveAt(i int) {
	for j := t.next(i); t.slots[j].h != 0; j = t.next(j) {
		k := t.home(t.slots[j].h)
		// The entry at j may move to the hole at i unless its home lies
		// cyclically in (i, j].
		if i <= j && i < k && k <= j || i > j && (i < k || k <= j) {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = slot[V]{}
	t.n--
}

// KeepOnly removes every value for which keep returns false, rebuilding
// the table in one pass.
func (t *Table[V]) KeepOnly(keep func(v *V) bool) {
	old := t.slots
	*t = Table[V]{}
	n := 0
	for i := range old {
		if old[i].h != 0 && keep(&old[i].v) {
			n++
		}
	}
	t.Reserve(n)
	for i := range old {
		if old[i].h != 0 && keep(&old[i].v) {
			t.Insert(old[i].h, old[i].v)
		}
	}
}
