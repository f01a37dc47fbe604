// Package hashtab is a multi-map from 64-bit hashes to small values, for
// indexes that hold millions of entries: open addressing with linear
// probing, kept between 40% and 80% full (it doubles when it grows, so
// each value is moved once on average), each slot the hash and the value
// side by side, so a lookup usually costs one cache miss where a Go map
// costs two or three. When V holds no pointers the garbage collector has
// nothing in the table to scan.
//
// A table grows incrementally: the values of the old table move to the new
// one a cluster at a time, at least moveStep slots with each insert, so
// that no insert waits for millions of values to move (a table of 3
// million moved at once took about 130 ms). Until they have all moved, a
// lookup looks in both.
//
// Values whose hashes are equal (two keys colliding, or one key stored
// twice) each get a slot; a lookup visits every candidate and the caller
// confirms the one it wants against the key it hashed.
//
// The slots a table grows into are fresh memory: the first write to each
// page costs a page fault (a first read costs one too, and the write after
// it another). A caller that inserts millions may have the next table made
// beside its inserts: SpareWanted tells when the table is close to growing
// and what size it will want, NewSpare makes that many slots and writes
// into each of their pages (call it on a goroutine of its own), and
// SetSpare hands them to the table, which grows into them.
//
// A Table is not safe for concurrent use; Lookup, At, Touch and Len do
// not change it, so they may run concurrently with each other. The zero
// Table is empty and ready to use.
package hashtab

import (
	"math/bits"
	"unsafe"
)

// Table is the multi-map. See the package doc.
type Table[V any] struct {
	slots []slot[V]
	n     int // values in slots

	// While the table grows: the table its values are moving from, how
	// many values it still holds, where the move started (an empty slot)
	// and how many slots from there it has passed. Moved slots are
	// emptied, and the move stops only at an empty slot, so every cluster
	// of the old table is either gone or whole: probes there work as in
	// any table.
	old   []slot[V]
	oldN  int
	start int
	done  int

	// spare is the slots the next grow takes, when SetSpare gave them.
	spare []slot[V]
}

// Spare is the slots of a table made ahead of its growth: see NewSpare.
type Spare[V any] struct{ slots []slot[V] }

type slot[V any] struct {
	h uint64 // 0 marks an empty slot
	v V
}

// minSlots is the size of a table's first allocation.
const minSlots = 1024

// spareFrom is the fewest slots a table must want when it next grows for
// SpareWanted to ask for a spare: below it the faults are too few to matter.
const spareFrom = 1 << 15

// moveStep is the fewest slots of the old table an insert moves (then on
// to the end of the cluster it is in). The old table holds at most 80% of
// its slots and the new one has twice as many, so the move ends after a
// small part of the inserts the new table takes before it grows again.
const moveStep = 64

// fix keeps hashes off 0, which marks an empty slot.
func fix(h uint64) uint64 {
	if h == 0 {
		return 1
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
	if (t.Len()+1)*5 > len(t.slots)*4 {
		t.grow()
	}
	put(t.slots, h, v)
	t.n++
}

// FindOrInsert returns the slot of a value stored under h, any of them,
// when there is one (found); otherwise it inserts v under h and returns
// its slot. It is Lookup with a match that takes any value, followed by
// Insert when that finds none, in one probe. The slot is valid until the
// table next changes.
func (t *Table[V]) FindOrInsert(h uint64, v V) (i int, found bool) {
	h = fix(h)
	if t.old == nil && (t.n+1)*5 <= len(t.slots)*4 {
		s := t.slots
		for i = home(s, h); s[i].h != 0; i = next(s, i) {
			if s[i].h == h {
				return i, true
			}
		}
		s[i] = slot[V]{h, v}
		t.n++
		return i, false
	}
	if i = t.Lookup(h, func(*V) bool { return true }); i >= 0 {
		return i, true
	}
	t.Insert(h, v)
	return t.Lookup(h, func(*V) bool { return true }), false
}

// put stores v under h in the first free slot of its probe in slots.
func put[V any](slots []slot[V], h uint64, v V) {
	i := home(slots, h)
	for slots[i].h != 0 {
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
	bigger := t.spare
	if want := t.nextSize(); len(bigger) != want {
		bigger = make([]slot[V], want)
	}
	t.spare = nil
	if t.n == 0 {
		t.slots = bigger
		return
	}
	start := 0
	for t.slots[start].h != 0 { // a table at most 80% full has empty slots
		start++
	}
	t.old, t.oldN, t.start, t.done = t.slots, t.n, start, 0
	t.slots, t.n = bigger, 0
}

// nextSize is how many slots the table has once it next grows.
func (t *Table[V]) nextSize() int { return max(minSlots, len(t.slots)*2) }

// SpareWanted returns how many slots the table will want when it next
// grows, once it is 75% full (it grows at 80%) and has no spare, and when
// that is at least spareFrom slots; 0 otherwise. See NewSpare. A table
// given a spare holds it until it grows, or until Reserve or KeepOnly
// remakes it.
func (t *Table[V]) SpareWanted() int {
	if t.spare != nil || len(t.slots) < spareFrom/2 || t.Len()*4 < len(t.slots)*3 {
		return 0
	}
	return t.nextSize()
}

// NewSpare makes n slots for a table to grow into and writes into each of
// their pages, so that the table's inserts find them mapped. It does not
// touch any table: call it away from the inserts, then hand its result to
// SetSpare.
func NewSpare[V any](n int) *Spare[V] {
	s := make([]slot[V], n)
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), uintptr(n)*unsafe.Sizeof(slot[V]{}))
	for i := 0; i < len(b); i += pageSize {
		b[i] = 0
	}
	return &Spare[V]{slots: s}
}

// pageSize is the step at which NewSpare writes: the smallest page size of
// the systems Go runs on.
const pageSize = 4096

// SetSpare gives the table s's slots to grow into, when they are as many
// as its next growth wants (SpareWanted); otherwise it drops them.
func (t *Table[V]) SetSpare(s *Spare[V]) {
	if s != nil && len(s.slots) == t.nextSize() {
		t.spare = s.slots
	}
}

// move moves at least k slots of the old table, then on to the next empty
// one, and drops the old table once every slot has moved.
func (t *Table[V]) move(k int) {
	old := t.old
	for t.done < len(old) {
		i := t.start + t.done
		if i >= len(old) {
			i -= len(old)
		}
		if k <= 0 && old[i].h == 0 {
			return
		}
		if s := old[i]; s.h != 0 {
			put(t.slots, s.h, s.v)
			old[i] = slot[V]{}
			t.n++
			t.oldN--
		}
		t.done++
		k--
	}
	t.old, t.oldN, t.start, t.done = nil, 0, 0, 0
}

// Lookup calls match with each value stored under h, in no particular
// order, until match returns true, and returns that value's slot; -1 when
// none matched. The slot is valid until the table next changes.
func (t *Table[V]) Lookup(h uint64, match func(v *V) bool) int {
	h = fix(h)
	if s := t.slots; t.n > 0 {
		for i := home(s, h); s[i].h != 0; i = next(s, i) {
			if s[i].h == h && match(&s[i].v) {
				return i
			}
		}
	}
	if t.oldN > 0 {
		return t.lookupOld(h, match)
	}
	return -1
}

// lookupOld is Lookup in the table being moved from.
func (t *Table[V]) lookupOld(h uint64, match func(v *V) bool) int {
	s := t.old
	for i := home(s, h); s[i].h != 0; i = next(s, i) {
		if s[i].h == h && match(&s[i].v) {
			return len(t.slots) + i
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

// RemoveAt empties slot i, shifting the rest of its cluster back so that
// no probe sequence is broken.
func (t *Table[V]) RemoveAt(i int) {
	if i >= len(t.slots) {
		removeAt(t.old, i-len(t.slots))
		t.oldN--
		return
	}
	removeAt(t.slots, i)
	t.n--
}

func removeAt[V any](s []slot[V], i int) {
	for j := next(s, i); s[j].h != 0; j = next(s, j) {
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
