package pigeon

import (
	"context"
	"sort"
	"strings"
	"sync"

	"pigeon/store"
)

// groupTable holds the live state of every consumer group, and how many
// groups (pull cursors aside) each subject has.
type groupTable struct {
	mu        sync.Mutex
	m         map[store.GroupKey]*group
	bySubject map[string]int
}

func (t *groupTable) init() {
	t.m = map[store.GroupKey]*group{}
	t.bySubject = map[string]int{}
}

// full reports whether key is a new group of a subject that has limit
// groups already (limit < 0: never); t.mu must be held.
func (t *groupTable) full(key store.GroupKey, limit int) bool {
	return limit >= 0 && t.m[key] == nil && !strings.HasPrefix(key.Group, cursorPrefix) && t.bySubject[key.Subject] >= limit
}

// put adds g; t.mu must be held.
func (t *groupTable) put(g *group) {
	t.m[g.key] = g
	if !strings.HasPrefix(g.key.Group, cursorPrefix) {
		t.bySubject[g.key.Subject]++
	}
}

// group is one consumer group's delivery state on one subject: for a
// pubsub cursor, Floor is the last delivered sequence; for a work queue,
// every sequence <= Floor is done and leases track what is in flight.
type group struct {
	mu       sync.Mutex
	key      store.GroupKey
	prog     store.GroupState // Floor and Done, kept by MarkDone as the store keeps them; Attempts stays nil
	next     uint64           // lowest sequence never handed out, > Floor
	attempts map[uint64]int
	leases   map[uint64]*lease
	retry    []uint64 // sequences due for redelivery (lease expired or nacked), ascending by due
}

// group returns the loaded state of key. Leases live in memory only: after
// a restart every recorded attempt that is not done is due again.
func (e *Engine) group(ctx context.Context, key store.GroupKey) (*group, error) {
	return e.groupWithin(ctx, key, -1)
}

// groupWithin is group, but refuses with TOO_MANY_GROUPS to start a group
// of a subject that has limit groups already (limit < 0: no limit).
func (e *Engine) groupWithin(ctx context.Context, key store.GroupKey, limit int) (*group, error) {
	e.groups.mu.Lock()
	g, full := e.groups.m[key], e.groups.full(key, limit)
	e.groups.mu.Unlock()
	if g != nil {
		return g, nil
	}
	if full {
		return nil, errTooManyGroups(key.Subject, limit)
	}
	st, err := e.store.LoadGroup(ctx, key)
	if err != nil {
		return nil, storeError(err)
	}
	g = &group{key: key, prog: store.GroupState{Floor: st.Floor, Done: st.Done}, next: st.Floor + 1, attempts: map[uint64]int{}, leases: map[uint64]*lease{}}
	for _, s := range st.Done {
		if s >= g.next {
			g.next = s + 1
		}
	}
	var due []uint64
	for s, n := range st.Attempts {
		g.attempts[s] = n
		if s >= g.next {
			g.next = s + 1
		}
		due = append(due, s)
	}
	sort.Slice(due, func(i, j int) bool { return due[i] < due[j] })
	g.retry = due
	e.groups.mu.Lock()
	defer e.groups.mu.Unlock()
	if prev := e.groups.m[key]; prev != nil {
		return prev, nil
	}
	if e.groups.full(key, limit) {
		return nil, errTooManyGroups(key.Subject, limit)
	}
	e.groups.put(g)
	return g, nil
}

func errTooManyGroups(subject string, limit int) error {
	return NewError(CodeTooManyGroups, "subject %q has %d consumer groups, the most allowed; join one of them", subject, limit)
}
