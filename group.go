package pigeon

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	"pigeon/store"
)

// groupTable holds the live state of the consumer groups in use, and the
// groups (pull cursors aside) of each subject.
//
// Every user of a group holds it: group and groupWithin take a hold,
// releaseGroup ends it, and a subscription holds its group from Subscribe
// until it has stopped. A group is in the table while it is held or while
// it keeps something the store does not (see group.idle); the last
// release of an idle group takes it out, and so does a subject at its
// cap for the groups nobody holds that have become idle since (sweep).
// The next user loads it from the store again. A key has one *group at a
// time: two would each lease the same message to a consumer of their own.
//
// Lock order: groupTable.mu before group.mu; nobody takes or releases a
// group with a group.mu held.
type groupTable struct {
	mu        sync.Mutex
	m         map[store.GroupKey]*group
	bySubject map[string]map[*group]struct{}
}

func (t *groupTable) init() {
	t.m = map[store.GroupKey]*group{}
	t.bySubject = map[string]map[*group]struct{}{}
}

// full reports whether key is a new group of a subject that has limit
// groups already (limit < 0: never); t.mu must be held.
func (t *groupTable) full(key store.GroupKey, limit int) bool {
	return limit >= 0 && t.m[key] == nil && !strings.HasPrefix(key.Group, cursorPrefix) && len(t.bySubject[key.Subject]) >= limit
}

// put adds g; t.mu must be held.
func (t *groupTable) put(g *group) {
	t.m[g.key] = g
	if !strings.HasPrefix(g.key.Group, cursorPrefix) {
		gs := t.bySubject[g.key.Subject]
		if gs == nil {
			gs = map[*group]struct{}{}
			t.bySubject[g.key.Subject] = gs
		}
		gs[g] = struct{}{}
	}
}

// drop takes g out, if it is there; t.mu must be held.
func (t *groupTable) drop(g *group) {
	if t.m[g.key] != g {
		return
	}
	delete(t.m, g.key)
	if gs := t.bySubject[g.key.Subject]; gs != nil {
		if delete(gs, g); len(gs) == 0 {
			delete(t.bySubject, g.key.Subject)
		}
	}
}

// sweep takes out the groups of subject that nobody holds and that have
// become idle since their last release, as their leases ran out; t.mu
// must be held.
func (t *groupTable) sweep(subject string, now time.Time) {
	for g := range t.bySubject[subject] {
		if g.refs > 0 {
			continue
		}
		g.mu.Lock()
		idle := g.idle(now)
		g.mu.Unlock()
		if idle {
			t.drop(g)
		}
	}
}

// group is one consumer group's delivery state on one subject: for a
// pubsub cursor, Floor is the last delivered sequence; for a work queue,
// every sequence <= Floor is done and leases track what is in flight.
type group struct {
	key    store.GroupKey
	refs   int           // holds (groupTable.mu)
	loaded chan struct{} // closed once loaded from the store, or once the load failed (err)
	err    error         // why the load failed; written before loaded closes

	mu       sync.Mutex
	prog     store.GroupState // Floor and Done, kept by MarkDone and RaiseFloor as the store keeps them; Attempts stays nil
	next     uint64           // lowest sequence never handed out, > Floor
	attempts map[uint64]int
	leases   map[uint64]*lease
	retry    []uint64 // sequences due for redelivery (lease expired or nacked), ascending by due
	// unspent: cluster leases this node acquired whose attempt the store
	// refused to record (leaseMsg), with a Leaser that cannot give them
	// back uncounted (no LeaseReturner; Engine.unspent): nobody was
	// handed their messages, and the next lease of each here takes its
	// cluster lease over while it holds, rather than acquire it again and
	// spend one more attempt.
	unspent map[uint64]clusterLease
	// exhausted: messages whose exhaustion is written (quarantine copy,
	// delivery.exhausted record) but not their done mark (exhaust): the
	// next try only marks them done.
	exhausted map[uint64]bool
}

// idle reports whether g keeps nothing at now that the store does not, so
// that it may leave memory and be loaded again as it stands:
//
//   - no lease that holds its message: one with a holder (a consumer may
//     still settle it) or a deadline still to come (a nack's delay, or
//     another node's lease) lives in memory only. A lease that ran out
//     with no holder is a redelivery due;
//   - no redelivery due, nor free lease, of a sequence whose attempt the
//     store has not recorded (g.attempts counts a sequence the store
//     has an attempt of: MarkAttempt comes before g counts an attempt,
//     and uncount lowers a count the store keeps, or writes the one it
//     gives back), which loading the group would not find due again;
//   - no cluster lease held for a next attempt (unspent), and no
//     exhaustion waiting for its done mark (exhausted): loaded again, the
//     group would spend one more attempt, or write the exhaustion's audit
//     record again.
//
// Floor and Done reach the store before g takes them, and every sequence
// below next is done, leased or due, so the store gives next back too.
// g.mu must be held.
func (g *group) idle(now time.Time) bool {
	for seq, l := range g.leases {
		if _, counted := g.attempts[seq]; l.holder != "" || l.busy || now.Before(l.deadline) || !counted {
			return false
		}
	}
	for _, seq := range g.retry {
		if _, counted := g.attempts[seq]; !counted && !g.prog.IsDone(seq) {
			return false
		}
	}
	for _, l := range g.unspent {
		if now.Before(l.until) {
			return false
		}
	}
	return len(g.exhausted) == 0
}

// held counts the leases of g its consumers hold (lease.held); g.mu must
// be held.
func (g *group) held() int {
	n := 0
	for _, l := range g.leases {
		if l.held() {
			n++
		}
	}
	return n
}

// group returns the state of key, loaded from the store unless it is in
// memory, and holds it: the caller ends the hold with releaseGroup. Leases
// live in memory only: after a restart every recorded attempt that is not
// done is due again.
func (e *Engine) group(ctx context.Context, key store.GroupKey) (*group, error) {
	return e.holdGroup(ctx, key, -1, -1)
}

// groupWithin is group, as a subscriber takes it: it refuses with
// TOO_MANY_GROUPS to start a group of a subject that has limit groups in
// memory already (limit < 0: no limit), or a group with no stored
// progress (a new name) of a subject whose store keeps
// Options.MaxStoredGroupsPerSubject groups already (see storedFull).
func (e *Engine) groupWithin(ctx context.Context, key store.GroupKey, limit int) (*group, error) {
	return e.holdGroup(ctx, key, limit, e.opts.MaxStoredGroupsPerSubject)
}

// holdGroup is group within limit groups of key's subject in memory and,
// when it loads key with no stored progress, stored groups in the store
// (either < 0: no limit).
func (e *Engine) holdGroup(ctx context.Context, key store.GroupKey, limit, stored int) (*group, error) {
	t := &e.groups
	for {
		t.mu.Lock()
		g := t.m[key]
		if g == nil {
			if t.full(key, limit) {
				t.sweep(key.Subject, e.now())
			}
			if t.full(key, limit) {
				t.mu.Unlock()
				return nil, errTooManyGroups(key.Subject, limit)
			}
			// In the table at once: whoever comes for key meanwhile waits
			// for this load rather than loading a second group.
			g = &group{key: key, refs: 1, loaded: make(chan struct{})}
			t.put(g)
			t.mu.Unlock()
			if err := e.loadGroup(ctx, g); err != nil {
				return nil, err
			}
			if stored >= 0 {
				full, err := e.storedFull(ctx, g, stored)
				if err != nil || full {
					e.releaseGroup(g)
					if err != nil {
						return nil, storeError(err)
					}
					return nil, errTooManyStoredGroups(key.Subject, stored)
				}
			}
			return g, nil
		}
		g.refs++
		t.mu.Unlock()
		select {
		case <-g.loaded:
		case <-ctx.Done():
			e.releaseGroup(g)
			return nil, storeError(ctx.Err())
		}
		if g.err == nil {
			return g, nil
		}
		// Its loader failed, or it stood for a group being pruned, and
		// it is out of the table: load anew.
		e.releaseGroup(g)
		if err := ctx.Err(); err != nil {
			return nil, storeError(err)
		}
	}
}

// loadGroup fills in g, just put in the table and held by the caller, from
// the store, with its floor raised past the messages trimmed since it last
// wrote (raisePastTrimmed); a pull cursor's floor is raised as it reads
// (receiveCursor), which spares each pull a question to the store. When
// the store fails, g leaves the table and the hold ends.
func (e *Engine) loadGroup(ctx context.Context, g *group) error {
	defer close(g.loaded)
	err := e.fillGroup(ctx, g)
	if err == nil && !strings.HasPrefix(g.key.Group, cursorPrefix) {
		err = e.raisePastTrimmed(ctx, g)
	}
	if err != nil {
		g.err = storeError(err)
		e.groups.mu.Lock()
		g.refs--
		e.groups.drop(g)
		e.groups.mu.Unlock()
		return g.err
	}
	return nil
}

// fillGroup sets g's state to what the store keeps of it.
func (e *Engine) fillGroup(ctx context.Context, g *group) error {
	st, err := e.store.LoadGroup(ctx, g.key)
	if err != nil {
		return err
	}
	g.prog = store.GroupState{Floor: st.Floor, Done: st.Done}
	g.next = st.Floor + 1
	g.attempts, g.leases = map[uint64]int{}, map[uint64]*lease{}
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
	return nil
}

// releaseGroup ends a hold of g. The last one takes g out of memory if it
// is idle; a group left with leases stays until a later user settles them
// and lets go, or they run out and a sweep finds it.
func (e *Engine) releaseGroup(g *group) {
	t := &e.groups
	t.mu.Lock()
	defer t.mu.Unlock()
	if g.refs--; g.refs > 0 || t.m[g.key] != g {
		return
	}
	g.mu.Lock()
	idle := g.idle(e.now())
	g.mu.Unlock()
	if idle {
		t.drop(g)
	}
}

// errPruned is the load error of the stand-in that pruneGroups puts in
// the table for a group whose stored state it may delete. Nobody gets it:
// whoever waited for the stand-in loads the group anew.
var errPruned = errors.New("pigeon: group pruned")

// pruneGroups deletes the stored state of the groups of subject last
// written before t that are not in the table, and returns how many it
// deleted. Before the store deletes a group, a stand-in takes its key in
// the table, loaded never and held by pruneGroups (so no release takes it
// out), and stays there until the store is done: whoever comes for the
// group meanwhile waits for it, then loads the group anew, after the
// deletion. So no group in memory runs on state the store has deleted.
// The stand-ins are not among the subject's groups (bySubject): they
// count against no cap.
func (e *Engine) pruneGroups(ctx context.Context, gp store.GroupPruner, subject string, t time.Time) (int, error) {
	tbl := &e.groups
	var held []*group
	// The stand-ins go even when the store panics (the retention pass
	// survives it): one left in the table would hold its group's name,
	// and everyone who came for it would wait, for good.
	defer func() {
		tbl.mu.Lock()
		for _, g := range held {
			g.refs--
			tbl.drop(g)
			g.err = errPruned
			close(g.loaded)
		}
		tbl.mu.Unlock()
	}()
	return gp.PruneGroups(ctx, subject, t, func(name string) bool {
		key := store.GroupKey{Subject: subject, Group: name}
		tbl.mu.Lock()
		defer tbl.mu.Unlock()
		if tbl.m[key] != nil {
			return true // in use, or being loaded
		}
		g := &group{key: key, refs: 1, loaded: make(chan struct{})}
		tbl.m[key] = g
		held = append(held, g)
		return false
	})
}

// storedFull reports whether g, just loaded and held by the caller, is a
// new group of a subject whose store keeps the progress of limit groups
// (pull cursors aside) already. A group is new when the store keeps no
// progress of it: groups leave memory when idle, but their progress stays
// in the store until retention prunes it (GroupRetention, or as long as
// the subject keeps messages), so without this bound a subscriber cycling
// through names would grow the store without end. A store that cannot
// list its groups (store.GroupLister) is not bounded. The count is taken
// without a lock on the store: concurrent new groups, each seeing room,
// may take it past limit by as many as there are (MaxGroupsPerSubject at
// most on a node).
func (e *Engine) storedFull(ctx context.Context, g *group, limit int) (bool, error) {
	if strings.HasPrefix(g.key.Group, cursorPrefix) {
		return false, nil
	}
	g.mu.Lock()
	fresh := g.prog.Floor == 0 && len(g.prog.Done) == 0 && len(g.attempts) == 0
	g.mu.Unlock()
	gl, ok := e.store.(store.GroupLister)
	if !fresh || !ok {
		return false, nil
	}
	gs, err := gl.ListGroups(ctx, g.key.Subject, limit+1)
	if err != nil {
		return false, err
	}
	if _, ok := gs[g.key.Group]; ok {
		return false, nil // kept with no progress: not new
	}
	n := 0
	for name := range gs {
		if !strings.HasPrefix(name, cursorPrefix) {
			n++
		}
	}
	return n >= limit, nil
}

func errTooManyStoredGroups(subject string, limit int) error {
	return NewError(CodeTooManyGroups, "subject %q keeps the progress of %d consumer groups, the most allowed; join one of them (the progress of unused groups goes with retention)", subject, limit)
}

func errTooManyGroups(subject string, limit int) error {
	return NewError(CodeTooManyGroups, "subject %q has %d consumer groups, the most allowed; join one of them", subject, limit)
}
