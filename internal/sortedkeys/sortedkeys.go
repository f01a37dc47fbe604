// Package sortedkeys keeps the keys of a map in order beside it, for a
// listing that pages through the map by key: a page is a binary search
// and the entries on it, O(log n + page), where a scan of the map for the
// least keys after a cursor (firstn) is O(n) for every page, O(n²/page)
// to list a map of n keys page by page, all of it under the lock that
// guards the map.
//
// An Index is told of every key added to the map or removed from it
// (Changed) and of a map replaced whole (Reset). It sorts the map's keys
// at the first walk that needs them (lazily: a map never listed costs no
// index), and from then on keeps the keys changed since beside the sorted
// ones, at most MaxChanged of them; past that it forgets them all and the
// next walk sorts the keys again. So the index holds at most one key
// header per entry of the map and MaxChanged more, and a sort costs
// O(n log n) once per MaxChanged changes at most. A walk sorts with the
// map's lock given back: it holds the lock only while it copies the keys
// (O(n), as a scan would) and while it reads a page.
//
// # Concurrency
//
// The map belongs to its owner, under the owner's lock. Changed and Reset
// are called with that lock held for writing (or before the map is
// shared); Walk with it held, for reading being enough: walks may run at
// once. The Index has a lock of its own for its fields, taken under the
// owner's and never held while the owner's is taken.
package sortedkeys

import (
	"maps"
	"slices"
	"strings"
	"sync"

	"pigeon/internal/firstn"
)

// MaxChanged is the most keys an Index keeps as changed (added or
// removed) since it last sorted the map's keys; one more, and it forgets
// the sorted keys: the next walk sorts them again. A walk merges the
// changed keys that follow its cursor (sorted once after a change) into
// the sorted ones, so they cost a page O(log MaxChanged) more.
const MaxChanged = 1024

// state is where an Index stands.
type state uint8

const (
	// stale: the Index holds no keys; the next walk sorts them. The zero
	// value.
	stale state = iota
	// building: a walk has copied the keys and sorts them with the map's
	// lock given back; keys changed meanwhile are kept as changed.
	building
	// ready: sorted and changed are the map's keys.
	ready
)

// Index keeps the keys of a map[string]V in order. See the package doc.
// The zero value holds no keys, and sorts them at the first walk.
type Index[V any] struct {
	mu    sync.Mutex
	state state
	// gen counts the builds begun and the keys forgotten: a build puts its
	// keys in place only if nothing was forgotten since it copied them.
	gen uint64
	// sorted is the map's keys when the last build copied them, in order.
	// It is never changed in place (a walk reads it without mu).
	sorted []string
	// changed holds the keys added to the map or removed from it since the
	// keys in sorted were copied: a key of sorted found here may have
	// gone, and one of the map not in sorted is here. At most MaxChanged.
	changed map[string]struct{}
	// changedSorted is changed in order, nil until a walk needs it after
	// a change. Never changed in place.
	changedSorted []string
}

// Changed records that key was added to the map or removed from it (a
// value replaced under a key the map keeps needs no call: a walk reads the
// values from the map). Call it with the owner's lock held for writing,
// before or after the change.
func (x *Index[V]) Changed(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.state == stale {
		return // the next walk copies the keys as they are then
	}
	if _, ok := x.changed[key]; ok {
		return
	}
	if len(x.changed) >= MaxChanged {
		x.forgetLocked()
		return
	}
	x.changed[key] = struct{}{}
	x.changedSorted = nil
}

// Reset forgets the keys: the owner replaced the map, or changed it
// without telling each key. The next walk sorts them again. Call it with
// the owner's lock held for writing.
func (x *Index[V]) Reset() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.forgetLocked()
}

func (x *Index[V]) forgetLocked() {
	x.state, x.sorted, x.changed, x.changedSorted = stale, nil, nil, nil
	x.gen++
}

// Walk calls yield with each key of the map that sorts after after, in
// order, and its value, until yield returns false or the keys run out.
// limit is the most keys yield takes (<= 0: every one): a walk that cannot
// use the sorted keys (another walk is sorting them, or the map changed
// too much while this one did) scans the map for the first limit keys
// after after, as firstn does.
//
// The caller holds l, the owner's lock (for reading is enough), and holds
// it again when Walk returns. When the keys must be sorted first, Walk
// gives l back while it sorts them, and takes it again before it reads the
// map (through m: the owner may have replaced it meanwhile) or calls
// yield: the walk is of the map as it is then, and anything the caller
// read under l before Walk may have changed.
func (x *Index[V]) Walk(l sync.Locker, m func() map[string]V, after string, limit int, yield func(key string, v V) bool) {
	x.mu.Lock()
	if x.state == stale {
		x.build(l, m)
	}
	if x.state != ready {
		x.mu.Unlock()
		scan(m(), after, limit, yield)
		return
	}
	sorted, changed, extra := x.sorted, x.changed, x.changedSortedLocked()
	x.mu.Unlock()
	merge(m(), sorted, changed, extra, after, yield)
}

// build copies the keys of the map, sorts them with l given back, and puts
// them in place unless the keys were forgotten meanwhile. x.mu and l are
// held; they are held again when it returns.
func (x *Index[V]) build(l sync.Locker, m func() map[string]V) {
	cur := m()
	keys := make([]string, 0, len(cur))
	keys = slices.AppendSeq(keys, maps.Keys(cur))
	x.gen++
	gen := x.gen
	x.state, x.changed, x.changedSorted = building, map[string]struct{}{}, nil
	x.mu.Unlock()
	l.Unlock()
	slices.Sort(keys)
	l.Lock()
	x.mu.Lock()
	if x.state == building && x.gen == gen {
		x.state, x.sorted = ready, keys
	}
}

// changedSortedLocked is changed in order, sorted once after a change.
func (x *Index[V]) changedSortedLocked() []string {
	if x.changedSorted == nil && len(x.changed) > 0 {
		x.changedSorted = slices.Sorted(maps.Keys(x.changed))
	}
	return x.changedSorted
}

// merge yields, in order, the keys of m after after: those of sorted that
// changed does not name, and those of extra (changed, in order) that m
// holds.
func merge[V any](m map[string]V, sorted []string, changed map[string]struct{}, extra []string, after string, yield func(string, V) bool) {
	i, j := past(sorted, after), past(extra, after)
	for {
		for i < len(sorted) {
			if _, ok := changed[sorted[i]]; !ok {
				break
			}
			i++ // its key is in extra if m still holds it
		}
		var key string
		switch {
		case j < len(extra) && (i == len(sorted) || extra[j] < sorted[i]):
			key = extra[j]
			j++
		case i < len(sorted):
			key = sorted[i]
			i++
		default:
			return
		}
		v, ok := m[key]
		if !ok {
			continue // a changed key removed
		}
		if !yield(key, v) {
			return
		}
	}
}

// past is the index of the first key of sorted after after.
func past(sorted []string, after string) int {
	i, found := slices.BinarySearch(sorted, after)
	if found {
		i++
	}
	return i
}

// scan yields, in order, the first limit keys of m after after (every one
// when limit <= 0), found by one pass over m that keeps no more of them.
func scan[V any](m map[string]V, after string, limit int, yield func(string, V) bool) {
	room := len(m)
	if limit > 0 && limit < room {
		room = limit
	}
	type keyed struct {
		key string
		v   V
	}
	k := firstn.New(room, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	for key, v := range m {
		if key > after {
			k.Offer(keyed{key, v})
		}
	}
	for _, e := range k.Sorted() {
		if !yield(e.key, e.v) {
			return
		}
	}
}
