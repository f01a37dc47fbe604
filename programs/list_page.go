package programs

import (
	"context"
	"slices"

	"pigeon"
)

// ListPage returns one page of the deployed programs that keep accepts
// (nil: every one), by name: the first max whose names sort after after
// ("": from the first; max <= 0: every one after it), and next, the after
// of the page that follows: the last name of this one, or "" when no
// program keep accepts follows it. Programs keep refuses take no place in
// a page, and next never names one. It holds the page alone (and one
// more), never a copy of every program, and shows each as Get does. The
// page is found by the names in order (sortedNames): a binary search and
// the programs from there, not a scan of every program for each page. An
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
	var kept []*Info
	for _, name := range mg.names.after(after) {
		p := mg.progs[name]
		if p == nil {
			continue // cannot be: names is kept in step with progs
		}
		if in := p.view.Load(); in != nil && (keep == nil || keep(*in)) {
			kept = append(kept, in)
			if max > 0 && len(kept) > max { // one more tells whether another follows
				break
			}
		}
	}
	mg.mu.Unlock()
	if max > 0 && len(kept) > max {
		kept = kept[:max]
		next = kept[max-1].Name
	}
	page = make([]Info, len(kept))
	for i, in := range kept {
		page[i] = *in
	}
	return page, next, nil
}

// sortedNames is the names of a Manager's programs in order, kept in step
// with its table (Manager.progs) under its lock: a page of ListPage is a
// binary search and the programs from there, not a scan of every program
// for each page. A name is added or removed in O(n) (a copy of the names
// after it), which a deploy or a removal does once beside its own far
// larger work (a module compiled, a binding started or stopped); the
// programs restored at start come in order, each added at the end.
type sortedNames []string

// add adds name, unless it is there.
func (s *sortedNames) add(name string) {
	if i, found := slices.BinarySearch(*s, name); !found {
		*s = slices.Insert(*s, i, name)
	}
}

// remove removes name, if it is there.
func (s *sortedNames) remove(name string) {
	if i, found := slices.BinarySearch(*s, name); found {
		*s = slices.Delete(*s, i, i+1)
	}
}

// after is the names that sort after after, in order: a view of s, valid
// until s next changes.
func (s sortedNames) after(after string) []string {
	i, found := slices.BinarySearch(s, after)
	if found {
		i++
	}
	return s[i:]
}
