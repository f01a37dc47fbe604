package wal

import "pigeon/internal/hashtab"

// idTable maps a message id's hash to the message's location: 16 bytes a
// slot, so about 20-30 bytes a message whatever the id's length. Ids whose
// hashes are equal each get a slot; the caller confirms a candidate against
// the record on disk. Not safe for concurrent use.
type idTable struct{ hashtab.Table[uint64] }

// idSlot is one id's hash and location, as a scan collects them.
type idSlot struct{ h, loc uint64 }

// find returns the locations stored under h.
func (t *idTable) find(h uint64) []uint64 {
	var locs []uint64
	t.Lookup(h, func(v *uint64) bool {
		locs = append(locs, *v)
		return false
	})
	return locs
}

// remove deletes the slot (h, loc), if any.
func (t *idTable) remove(h, loc uint64) {
	if i := t.Lookup(h, func(v *uint64) bool { return *v == loc }); i >= 0 {
		t.RemoveAt(i)
	}
}
