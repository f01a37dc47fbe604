// Package firstn keeps the n least of the values offered to it, in an
// order the caller gives, holding no more than n of them: one page of a
// listing read from a map (the accounts after a cursor, say) is found in
// O(m log n) time and O(n) room for a map of m entries, where sorting the
// map would copy every one of them to answer a page of ten.
//
// A Keeper is not safe for concurrent use.
package firstn

import "slices"

// Keeper keeps the n least values offered to it. See the package doc.
type Keeper[T any] struct {
	n   int
	cmp func(a, b T) int
	// h is a max-heap by cmp: h[0] is the greatest value kept, the
	// first to go when a lesser one is offered to a full Keeper.
	h []T
}

// New returns a Keeper of the n least values by cmp (negative when a
// sorts before b, as slices.SortFunc takes it). n <= 0 keeps none.
func New[T any](n int, cmp func(a, b T) int) *Keeper[T] {
	return &Keeper[T]{n: max(n, 0), cmp: cmp}
}

// Offer keeps v when it is among the n least offered so far; the greatest
// kept then goes if n were already kept.
func (k *Keeper[T]) Offer(v T) {
	switch {
	case len(k.h) < k.n:
		k.h = append(k.h, v)
		k.up(len(k.h) - 1)
	case k.n > 0 && k.cmp(v, k.h[0]) < 0:
		k.h[0] = v
		k.down(0)
	}
}

// Len is how many values are kept.
func (k *Keeper[T]) Len() int { return len(k.h) }

// Sorted returns the values kept, least first. The Keeper is spent: the
// slice is its own, and it keeps nothing after.
func (k *Keeper[T]) Sorted() []T {
	out := k.h
	k.h = nil
	slices.SortFunc(out, k.cmp)
	return out
}

// up moves h[i] towards the root while it is greater than its parent.
func (k *Keeper[T]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if k.cmp(k.h[i], k.h[p]) <= 0 {
			return
		}
		k.h[i], k.h[p] = k.h[p], k.h[i]
		i = p
	}
}

// down moves h[i] away from the root while a child is greater.
func (k *Keeper[T]) down(i int) {
	for {
		c := 2*i + 1
		if c >= len(k.h) {
			return
		}
		if r := c + 1; r < len(k.h) && k.cmp(k.h[r], k.h[c]) > 0 {
			c = r
		}
		if k.cmp(k.h[c], k.h[i]) <= 0 {
			return
		}
		k.h[i], k.h[c] = k.h[c], k.h[i]
		i = c
	}
}
