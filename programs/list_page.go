package programs

import (
	"container/heap"
	"context"
	"slices"
	"strings"

	"pigeon"
)

// ListPage returns one page of the deployed programs that keep accepts
// (nil: every one), by name: the first max whose names sort after after
// ("": from the first; max <= 0: every one after it), and next, the after
// of the page that follows: the last name of this one, or "" when no
// program keep accepts follows it. Programs keep refuses take no place in
// a page, and next never names one. It holds the page alone (and one
// more), never a copy of every program, and shows each as Get does. An
// after that is not a valid program name (ValidName) is INVALID_ARGUMENT;
// a closed Manager is SHUTTING_DOWN. keep runs with the Manager's lock
// held: it must not call the Manager.
func (mg *Manager) ListPage(_ context.Context, after string, max int, keep func(Info) bool) (page []Info, next string, err error) {
	if after != "" && !ValidName(after) {
		return nil, "", pigeon.NewError(pigeon.CodeInvalidArgument, "after must be a program name (%s)", nameRE)
	}
	mg.mu.Lock()
	if mg.closed {
		mg.mu.Unlock()
		return nil, "", pigeon.NewError(pigeon.CodeShutdown, "the program manager is closed")
	}
	room := len(mg.progs)
	if max > 0 && max < room {
		room = max + 1 // one more tells whether another follows
	}
	var h byNameDesc
	for name, p := range mg.progs {
		if name <= after {
			continue
		}
		in := p.view.Load()
		switch {
		case in == nil || keep != nil && !keep(*in):
		case len(h) < room:
			heap.Push(&h, in)
		case name < h[0].Name:
			h[0] = in
			heap.Fix(&h, 0)
		}
	}
	mg.mu.Unlock()
	slices.SortFunc(h, func(a, b *Info) int { return strings.Compare(a.Name, b.Name) })
	if max > 0 && len(h) > max {
		h = h[:max]
		next = h[max-1].Name
	}
	page = make([]Info, len(h))
	for i, in := range h {
		page[i] = *in
	}
	return page, next, nil
}

// byNameDesc is a heap of programs whose root is the greatest name: the
// first of a page's candidates to go when one that sorts before it is
// found.
type byNameDesc []*Info

func (h byNameDesc) Len() int           { return len(h) }
func (h byNameDesc) Less(i, j int) bool { return h[i].Name > h[j].Name }
func (h byNameDesc) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *byNameDesc) Push(x any)        { *h = append(*h, x.(*Info)) }

func (h *byNameDesc) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
