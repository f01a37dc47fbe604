package wal

import "math/bits"

// idTable maps a 64-bit id hash to message locations: an open-addressing
// table with linear probing, 16 bytes a slot, kept between 53% and 80%
// full, so about 20-30 bytes a message whatever the id's length. It is a
// multi-map: ids whose hashes are equal (or an id stored twice) each get a
// slot, and a lookup returns every candidate for the caller to confirm
// against the record on disk. Not safe for concurrent use.
type idTable struct {
	slots []idSlot
	n     int
}

type idSlot struct {
	h   uint64 // 0 marks an empty slot
	loc uint64
}

const idTableMin = 1024

func fixHash(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

// home is the slot a hash starts probing from (multiply-shift range
// reduction, so the size need not be a power of two).
func (t *idTable) home(h uint64) int {
	hi, _ := bits.Mul64(h, uint64(len(t.slots)))
	return int(hi)
}

func (t *idTable) next(i int) int {
	if i++; i == len(t.slots) {
		return 0
	}
	return i
}

func (t *idTable) insert(h, loc uint64) {
	h = fixHash(h)
	if (t.n+1)*5 > len(t.slots)*4 {
		t.grow()
	}
	i := t.home(h)
	for t.slots[i].h != 0 {
		i = t.next(i)
	}
	t.slots[i] = idSlot{h, loc}
	t.n++
}

// reserve sizes an empty table for n entries at 70% load.
func (t *idTable) reserve(n int) {
	if t.n == 0 && n*10/7 > len(t.slots) {
		t.slots = make([]idSlot, max(idTableMin, n*10/7))
	}
}

func (t *idTable) grow() {
	old := t.slots
	t.slots = make([]idSlot, max(idTableMin, len(old)*3/2))
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

// find returns the locations stored under h, oldest first.
func (t *idTable) find(h uint64) []uint64 {
	if t.n == 0 {
		return nil
	}
	h = fixHash(h)
	var locs []uint64
	for i := t.home(h); t.slots[i].h != 0; i = t.next(i) {
		if t.slots[i].h == h {
			locs = append(locs, t.slots[i].loc)
		}
	}
	return locs
}

// remove deletes the slot (h, loc), if any, shifting the rest of its
// cluster back so that no probe sequence is broken.
func (t *idTable) remove(h, loc uint64) {
	if t.n == 0 {
		return
	}
	h = fixHash(h)
	i := t.home(h)
	for ; ; i = t.next(i) {
		s := t.slots[i]
		if s.h == 0 {
			return
		}
		if s.h == h && s.loc == loc {
			break
		}
	}
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
	t.slots[i] = idSlot{}
	t.n--
}
