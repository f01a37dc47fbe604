package pigeon

import (
	"encoding/json"
	"slices"
)

// selectorIndex holds many (Selector, value) pairs, typically the
// subscriptions of one subject, and finds those whose selector matches a
// message without testing every selector in turn.
//
// # Design
//
// The index is a trie over the canonical segments of each selector (sorted
// by text; see Selector.String). A node holds the values whose selector ends
// there and one branch per distinct key tested next. A branch looks up the
// message's value at its key once, then descends into at most two children:
// the one for that exact value (a hash lookup) and the one for "key is
// present". So 10,000 subscriptions "/kind=chat/room=room-N" cost two field
// lookups and two map lookups per message, not 10,000 matches. Match-all
// selectors sit in the root node. A message's cost grows with the number of
// distinct keys on the paths it can take, not with the number of values.
//
// # Concurrency
//
// selectorIndex has no lock of its own. Match, AppendMatches and Len only
// read, so any number of them may run at once; Add and Remove must not run
// concurrently with any other method. The usual arrangement is a
// sync.RWMutex held by the owner: RLock around Match, Lock around Add and
// Remove. The callback given to Match must not call Add or Remove.
//
// The zero selectorIndex is empty and ready to use. It must not be copied
// after first use.
type selectorIndex[T comparable] struct {
	root selNode[T]
	n    int
}

// newSelectorIndex returns an empty index. It is the same as new(selectorIndex[T]);
// the zero value is ready to use too.
func newSelectorIndex[T comparable]() *selectorIndex[T] { return new(selectorIndex[T]) }

// selNode is a trie node: values whose selector ends here, and branches for
// the next key. Small sets are scanned; past indexMapMin a map finds entries.
type selNode[T comparable] struct {
	vals     []T
	valPos   map[T]int // index into vals; nil while len(vals) <= indexMapMin
	branches []*selBranch[T]
	brPos    map[string]int // index into branches by key; nil while small
}

// selBranch tests one key path: children by the value found there, and a
// child for presence alone.
type selBranch[T comparable] struct {
	key     string
	path    []selPart
	eq      map[string]*selNode[T]
	present *selNode[T]
}

// indexMapMin is the size above which a node indexes its values and
// branches by map instead of scanning them.
const indexMapMin = 8

// Add records v under sel. It reports whether the pair was new; adding the
// same (sel, v) twice is a no-op, but one v may be added under several
// selectors.
func (x *selectorIndex[T]) Add(sel Selector, v T) bool {
	n := &x.root
	for i := range sel.terms {
		t := &sel.terms[i]
		b := n.branch(t.key)
		if b == nil {
			b = &selBranch[T]{key: t.key, path: t.path}
			n.addBranch(b)
		}
		n = b.child(t, true)
	}
	if !n.addVal(v) {
		return false
	}
	x.n++
	return true
}

// Remove deletes the pair (sel, v) and reports whether it was present.
// Nodes left empty are freed.
func (x *selectorIndex[T]) Remove(sel Selector, v T) bool {
	type step struct {
		n *selNode[T]
		b *selBranch[T]
	}
	var path [MaxSelectorSegments]step
	n := &x.root
	for i := range sel.terms {
		t := &sel.terms[i]
		b := n.branch(t.key)
		if b == nil {
			return false
		}
		c := b.child(t, false)
		if c == nil {
			return false
		}
		path[i] = step{n, b}
		n = c
	}
	if !n.removeVal(v) {
		return false
	}
	x.n--
	for i := len(sel.terms) - 1; i >= 0 && n.empty(); i-- {
		p, b, t := path[i].n, path[i].b, &sel.terms[i]
		if t.presence {
			b.present = nil
		} else {
			delete(b.eq, t.value)
		}
		if b.present == nil && len(b.eq) == 0 {
			p.removeBranch(b.key)
		}
		n = p
	}
	return true
}

// Len returns the number of (selector, value) pairs.
func (x *selectorIndex[T]) Len() int { return x.n }

// Match calls fn once for every pair (sel, v) in the index with
// sel.Match(data), in no particular order. A value added under several
// matching selectors is passed once per selector. Match does not allocate.
func (x *selectorIndex[T]) Match(data any, fn func(T)) {
	x.root.match(data, fn)
}

// AppendMatches appends to dst the values Match would pass to fn, and
// returns the extended slice. With enough capacity in dst it does not
// allocate.
// needsData reports whether matching reads the data: false when every
// value in the index matches all.
func (x *selectorIndex[T]) needsData() bool { return len(x.root.branches) > 0 }

func (x *selectorIndex[T]) AppendMatches(dst []T, data any) []T {
	x.root.match(data, func(v T) { dst = append(dst, v) })
	return dst
}

func (n *selNode[T]) match(data any, fn func(T)) {
	for _, v := range n.vals {
		fn(v)
	}
	for _, b := range n.branches {
		v, ok := selectorLookup(data, b.path)
		if !ok {
			continue
		}
		if b.present != nil {
			b.present.match(data, fn)
		}
		if len(b.eq) > 0 {
			b.matchValue(v, data, fn)
		}
	}
}

// matchValue descends into the children whose value equals v, by the same
// rules as scalarEquals.
func (b *selBranch[T]) matchValue(v, data any, fn func(T)) {
	var c *selNode[T]
	switch x := v.(type) {
	case string:
		c = b.eq[x]
	case bool:
		if x {
			c = b.eq["true"]
		} else {
			c = b.eq["false"]
		}
	case nil:
		c = b.eq["null"]
	case float64:
		var buf [32]byte
		if t, ok := appendJSONFloat(buf[:0], x); ok {
			c = b.eq[string(t)]
		}
	case json.Number:
		c = b.eq[string(x)]
		if f, err := x.Float64(); err == nil {
			var buf [32]byte
			if t, ok := appendJSONFloat(buf[:0], f); ok && string(t) != string(x) {
				if c2 := b.eq[string(t)]; c2 != nil {
					c2.match(data, fn)
				}
			}
		}
	}
	if c != nil {
		c.match(data, fn)
	}
}

// child returns the child of b that t leads to, creating it if asked.
func (b *selBranch[T]) child(t *selTerm, create bool) *selNode[T] {
	if t.presence {
		if b.present == nil && create {
			b.present = new(selNode[T])
		}
		return b.present
	}
	c := b.eq[t.value]
	if c == nil && create {
		if b.eq == nil {
			b.eq = make(map[string]*selNode[T])
		}
		c = new(selNode[T])
		b.eq[t.value] = c
	}
	return c
}

func (n *selNode[T]) empty() bool { return len(n.vals) == 0 && len(n.branches) == 0 }

func (n *selNode[T]) branch(key string) *selBranch[T] {
	if n.brPos != nil {
		if i, ok := n.brPos[key]; ok {
			return n.branches[i]
		}
		return nil
	}
	for _, b := range n.branches {
		if b.key == key {
			return b
		}
	}
	return nil
}

func (n *selNode[T]) addBranch(b *selBranch[T]) {
	n.branches = append(n.branches, b)
	switch {
	case n.brPos != nil:
		n.brPos[b.key] = len(n.branches) - 1
	case len(n.branches) > indexMapMin:
		n.brPos = make(map[string]int, len(n.branches))
		for i, b := range n.branches {
			n.brPos[b.key] = i
		}
	}
}

func (n *selNode[T]) removeBranch(key string) {
	var i int
	if n.brPos != nil {
		i = n.brPos[key]
		delete(n.brPos, key)
	} else {
		i = slices.IndexFunc(n.branches, func(b *selBranch[T]) bool { return b.key == key })
	}
	last := len(n.branches) - 1
	if i != last {
		n.branches[i] = n.branches[last]
		if n.brPos != nil {
			n.brPos[n.branches[i].key] = i
		}
	}
	n.branches[last] = nil
	n.branches = n.branches[:last]
	if last == 0 {
		n.branches, n.brPos = nil, nil
	}
}

func (n *selNode[T]) addVal(v T) bool {
	if n.valPos != nil {
		if _, ok := n.valPos[v]; ok {
			return false
		}
	} else if slices.Contains(n.vals, v) {
		return false
	}
	n.vals = append(n.vals, v)
	switch {
	case n.valPos != nil:
		n.valPos[v] = len(n.vals) - 1
	case len(n.vals) > indexMapMin:
		n.valPos = make(map[T]int, len(n.vals))
		for i, v := range n.vals {
			n.valPos[v] = i
		}
	}
	return true
}

func (n *selNode[T]) removeVal(v T) bool {
	var i int
	if n.valPos != nil {
		j, ok := n.valPos[v]
		if !ok {
			return false
		}
		i = j
		delete(n.valPos, v)
	} else if i = slices.Index(n.vals, v); i < 0 {
		return false
	}
	last := len(n.vals) - 1
	if i != last {
		n.vals[i] = n.vals[last]
		if n.valPos != nil {
			n.valPos[n.vals[i]] = i
		}
	}
	var zero T
	n.vals[last] = zero
	n.vals = n.vals[:last]
	if last == 0 {
		n.vals, n.valPos = nil, nil
	}
	return true
}
