package wal

import "math/bits"

// hashTable is a multi-map from 64-bit hashes to small values: open
// addressing with linear probing, kept between 53% and 80% full. Values
// whose hashes are equal (two keys colliding, or one key stored twice)
// each get a slot; a lookup visits every candidate and the caller confirms
// the one it wants. The slots hold no pointers, so the GC never scans them.
// Not safe for concurrent use.
type hashTable[V any] struct {
	slots []hslot[V]
	n     int
}

type hslot[V any] struct {
	h uint64 // 0 marks an empty slot
	v V
}

// idTable maps a message id's hash to the message's location: 16 bytes a
// slot, so about 20-30 bytes a message whatever the id's length.
type idTable struct{ hashTable[uint64] }

// idSlot is one id and its location, as a scan collects them.
type idSlot = hslot[uint64]

const hashTableMin = 1024

func fixHash(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

// home is the slot a hash starts probing from (multiply-shift range
// reduction, so the size need not be a power of two).
func (t *hashTable[V]) home(h uint64) int {
	hi, _ := bits.Mul64(h, uint64(len(t.slots)))
	return int(hi)
}

func (t *hashTable[V]) next(i int) int {
	if i++; i == len(t.slots) {
		return 0
	}
	return i
}

func (t *hashTable[V]) insert(h uint64, v V) {
	h = fixHash(h)
	if (t.n+1)*5 > len(t.slots)*4 {
		t.grow()
	}
	i := t.home(h)
	for t.slots[i].h != 0 {
		i = t.next(i)
	}
	t.slots[i] = hslot[V]{h, v}
	t.n++
}

// reserve sizes an empty table for n entries at 70% load.
func (t *hashTable[V]) reserve(n int) {
	if t.n == 0 && n*10/7 > len(t.slots) {
		t.slots = make([]hslot[V], max(hashTableMin, n*10/7))
	}
}

func (t *hashTable[V]) grow() {
	old := t.slots
	t.slots = make([]hslot[V], max(hashTableMin, len(old)*3/2))
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

// lookup calls fn with each value stored under h, in no particular order,
// until fn returns true; it returns that value's slot, or -1.
func (t *hashTable[V]) lookup(h uint64, fn func(v *V) bool) int {
	if t.n == 0 {
		return -1
	}
	h = fixHash(h)
	for i := t.home(h); t.slots[i].h != 0; i = t.next(i) {
		if t.slots[i].h == h && fn(&t.slots[i].v) {
			return i
		}
	}
	return -1
}

// find returns the locations stored under h.
func (t *idTable) find(h uint64) []uint64 {
	var locs []uint64
	t.lookup(h, func(v *uint64) bool {
		locs = append(locs, *v)
		return false
	})
	return locs
}

// remove deletes the slot (h, loc), if any.
func (t *idTable) remove(h, loc uint64) {
	if i := t.lookup(h, func(v *uint64) bool { return *v == loc }); i >= 0 {
		t.removeAt(i)
	}
}

// removeAt empties slot i, shifting the rest of its cluster back so that
// no probe sequence is broken.
func (t *hashTable[V]) removeAt(i int) {
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
	t.slots[i] = hslot[V]{}
	t.n--
}

// keepOnly removes every value for which keep returns false, in one pass
// that rebuilds the table.
func (t *hashTable[V]) keepOnly(keep func(v *V) bool) {
	old := t.slots
	*t = hashTable[V]{}
	n := 0
	for i := range old {
		if old[i].h != 0 && keep(&old[i].v) {
			n++
		}
	}
	t.reserve(n)
	for i := range old {
		if old[i].h != 0 && keep(&old[i].v) {
			t.insert(old[i].h, old[i].v)
		}
	}
}
