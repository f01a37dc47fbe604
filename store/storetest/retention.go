package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

func (su *suite) testTrimAudit(t *testing.T) {
	s := su.store(t)
	tr, ok := s.(store.AuditTrimmer)
	if !ok {
		t.Skip("store does not implement store.AuditTrimmer")
	}
	ctx := t.Context()
	recs := Chain(10)
	require.NoError(t, s.AppendAudit(ctx, recs...))

	n, err := tr.TrimAuditBefore(ctx, recs[0].Time)
	require.NoError(t, err)
	require.Zero(t, n, "nothing is before the first record")

	n, err = tr.TrimAuditBefore(ctx, recs[4].Time)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	check := func(t *testing.T, s store.Store, want []store.AuditRecord, wantCP store.Checkpoint) {
		t.Helper()
		last, cp, err := s.AuditHead(ctx)
		require.NoError(t, err)
		require.Equal(t, wantCP, cp, "the checkpoint stands for the removed records")
		if len(want) > 0 {
			require.Equal(t, normAudit(want[len(want)-1]), normAudit(last))
		} else {
			require.Zero(t, last.Seq, "no record is left")
		}
		got, err := s.ReadAudit(ctx, 0, 0)
		require.NoError(t, err)
		require.Equal(t, normAudit(want...), normAudit(got...))
		require.NoError(t, store.VerifyChain(cp, got), "the remainder verifies from the checkpoint")
		n, err := store.VerifyAudit(ctx, s)
		require.NoError(t, err)
		require.Equal(t, uint64(len(want)), n)
	}
	cp := store.Checkpoint{Seq: recs[3].Seq, Hash: recs[3].Hash}
	check(t, s, recs[4:], cp)

	n, err = tr.TrimAuditBefore(ctx, recs[4].Time)
	require.NoError(t, err)
	require.Zero(t, n, "a second trim at the same time removes nothing")

	more := ChainFrom(store.Checkpoint{Seq: recs[9].Seq, Hash: recs[9].Hash}, 2)
	require.NoError(t, s.AppendAudit(ctx, more...), "the log continues after a trim")
	if su.f.Reopen != nil {
		s = su.reopen(t, s)
		tr = s.(store.AuditTrimmer)
		check(t, s, append(recs[4:10:10], more...), cp)
	}

	// Trim everything: the head is gone, the checkpoint stands for it.
	n, err = tr.TrimAuditBefore(ctx, at(time.Hour))
	require.NoError(t, err)
	require.Equal(t, 8, n)
	check(t, s, nil, store.Checkpoint{Seq: more[1].Seq, Hash: more[1].Hash})
}

func (su *suite) testTrimQuarantine(t *testing.T) {
	s := su.store(t)
	tr, ok := s.(store.QuarantineTrimmer)
	if !ok {
		t.Skip("store does not implement store.QuarantineTrimmer")
	}
	ctx := t.Context()
	var qs []store.QuarantineRecord
	for i := range 6 {
		q := store.QuarantineRecord{ID: fmt.Sprint("q", i), Time: at(time.Duration(i) * time.Second),
			Subject: "payments.authorize", Code: "SCHEMA_INVALID", Body: []byte(`{"card":"[REDACTED]"}`)}
		require.NoError(t, s.PutQuarantine(ctx, q))
		qs = append(qs, q)
	}
	// A release writes an old record again; its Time is still the original.
	qs[1].Released, qs[1].ReleasedBy, qs[1].ReleasedAt = true, "admin", at(time.Minute)
	require.NoError(t, s.PutQuarantine(ctx, qs[1]))

	n, err := tr.TrimQuarantineBefore(ctx, base)
	require.NoError(t, err)
	require.Zero(t, n, "nothing is before the first record")

	n, err = tr.TrimQuarantineBefore(ctx, at(3*time.Second))
	require.NoError(t, err)
	require.Equal(t, 3, n)
	check := func(t *testing.T, s store.Store) {
		t.Helper()
		list, err := s.ListQuarantine(ctx, time.Time{}, 0)
		require.NoError(t, err)
		require.Equal(t, normQuarantine(qs[3:]...), normQuarantine(list...))
		for _, q := range qs[:3] {
			_, err := s.GetQuarantine(ctx, q.ID)
			require.ErrorIs(t, err, store.ErrNotFound, q.ID)
		}
	}
	check(t, s)

	n, err = tr.TrimQuarantineBefore(ctx, at(3*time.Second))
	require.NoError(t, err)
	require.Zero(t, n, "a second trim at the same time removes nothing")
	if su.f.Reopen != nil {
		check(t, su.reopen(t, s))
	}
}

// between returns a time after every progress write so far and before
// every later one, by the wall clock, which stamps them. The margins
// cover a backend that keeps milliseconds, rounded up.
func between() time.Time {
	time.Sleep(5 * time.Millisecond)
	t := time.Now()
	time.Sleep(5 * time.Millisecond)
	return t
}

func (su *suite) testPruneGroups(t *testing.T) {
	s := su.store(t)
	gp, ok := s.(store.GroupPruner)
	if !ok {
		t.Skip("store does not implement store.GroupPruner")
	}
	ctx := t.Context()
	key := func(subject, group string) store.GroupKey { return store.GroupKey{Subject: subject, Group: group} }
	done := func(k store.GroupKey, seq uint64) { require.NoError(t, s.MarkDone(ctx, k, seq)) }
	// prune deletes the groups of subject written before before, but
	// those named in kept, and returns how many went and which groups keep
	// was asked about.
	prune := func(s store.Store, subject string, before time.Time, kept ...string) (int, []string) {
		t.Helper()
		var asked []string
		n, err := s.(store.GroupPruner).PruneGroups(ctx, subject, before, func(g string) bool {
			asked = append(asked, g)
			return slices.Contains(kept, g)
		})
		require.NoError(t, err)
		return n, asked
	}

	done(key("s", "acked"), 1)
	done(key("s", "acked"), 2)
	require.NoError(t, s.MarkAttempt(ctx, key("s", "attempted"), 3, 1))
	done(key("s", "kept"), 1)
	done(key("s", "rewritten"), 1)
	done(key("other", "acked"), 1)
	mark := between()
	done(key("s", "rewritten"), 2)
	require.NoError(t, s.MarkAttempt(ctx, key("s", "fresh"), 1, 1))

	n, asked := prune(s, "s", mark, "kept")
	require.Equal(t, 2, n, "the groups of s last written before the mark, but the one kept")
	require.ElementsMatch(t, []string{"acked", "attempted", "kept"}, asked, "keep is asked about each group written before the mark")
	for _, c := range []struct {
		key  store.GroupKey
		want store.GroupState
	}{
		{key("s", "acked"), store.GroupState{}},
		{key("s", "attempted"), store.GroupState{}},
		{key("s", "kept"), store.GroupState{Floor: 1}},
		{key("s", "rewritten"), store.GroupState{Floor: 2}},
		{key("s", "fresh"), store.GroupState{Attempts: map[uint64]int{1: 1}}},
		{key("other", "acked"), store.GroupState{Floor: 1}},
	} {
		requireGroup(t, s, c.key, c.want)
	}
	n, asked = prune(s, "s", mark)
	require.Equal(t, 1, n, "the group kept before goes once keep lets it")
	require.Equal(t, []string{"kept"}, asked, "deleted groups are gone")

	done(key("s", "acked"), 5)
	requireGroup(t, s, key("s", "acked"), store.GroupState{Done: []uint64{5}})

	// A group written after its time was read, before keep let it go, is
	// kept with the write.
	done(key("w", "racer"), 1)
	mark = between()
	n, err := gp.PruneGroups(ctx, "w", mark, func(g string) bool {
		done(key("w", g), 2)
		return false
	})
	require.NoError(t, err)
	require.Zero(t, n)
	requireGroup(t, s, key("w", "racer"), store.GroupState{Floor: 2})

	if su.f.Reopen == nil {
		return
	}
	// Deletions and write times survive a reopen.
	done(key("r", "before"), 1)
	mark = between()
	done(key("r", "after"), 1)
	s = su.reopen(t, s)
	requireGroup(t, s, key("s", "attempted"), store.GroupState{})
	requireGroup(t, s, key("s", "kept"), store.GroupState{})
	requireGroup(t, s, key("s", "acked"), store.GroupState{Done: []uint64{5}})
	n, asked = prune(s, "r", mark)
	require.Equal(t, 1, n)
	require.Equal(t, []string{"before"}, asked, "a group written before a reopen keeps its time")
	requireGroup(t, s, key("r", "before"), store.GroupState{})
	requireGroup(t, s, key("r", "after"), store.GroupState{Floor: 1})
	s = su.reopen(t, s)
	requireGroup(t, s, key("r", "before"), store.GroupState{})
	requireGroup(t, s, key("r", "after"), store.GroupState{Floor: 1})
}

// testRaiseFloor: RaiseFloor marks every sequence up to the floor done,
// as store.GroupState.RaiseFloor does, so that acks after it advance the
// floor instead of waiting in Done; a raise is a write for PruneGroups,
// and its state survives a reopen.
func (su *suite) testRaiseFloor(t *testing.T) {
	s := su.store(t)
	fr, ok := s.(store.FloorRaiser)
	if !ok {
		t.Skip("store does not implement store.FloorRaiser")
	}
	ctx := t.Context()
	cases := []struct {
		name  string
		done  []uint64
		tries map[uint64]int // attempts recorded before the raise
		floor uint64
		acks  []uint64 // marked done after the raise
		want  store.GroupState
	}{
		{name: "new group", floor: 5, want: store.GroupState{Floor: 5}},
		{name: "zero on a new group", floor: 0, want: store.GroupState{}},
		{name: "acks after it advance the floor", floor: 5, acks: []uint64{6, 8, 7}, want: store.GroupState{Floor: 8}},
		{name: "below the floor", done: []uint64{1, 2, 3, 5}, floor: 2, want: store.GroupState{Floor: 3, Done: []uint64{5}}},
		{name: "done at or below go, contiguous above join",
			done: []uint64{2, 4, 6, 7, 9}, tries: map[uint64]int{3: 2, 8: 1, 10: 3}, floor: 5,
			want: store.GroupState{Floor: 7, Done: []uint64{9}, Attempts: map[uint64]int{8: 1, 10: 3}}},
		{name: "a gap stays", done: []uint64{8}, tries: map[uint64]int{6: 1}, floor: 6, acks: []uint64{6, 7},
			want: store.GroupState{Floor: 8}},
	}
	key := func(name string) store.GroupKey { return store.GroupKey{Subject: "s", Group: name} }
	for _, c := range cases {
		k := key(c.name)
		for _, seq := range c.done {
			require.NoError(t, s.MarkDone(ctx, k, seq))
		}
		for seq, n := range c.tries {
			require.NoError(t, s.MarkAttempt(ctx, k, seq, n))
		}
		require.NoError(t, fr.RaiseFloor(ctx, k, c.floor))
		for _, seq := range c.acks {
			require.NoError(t, s.MarkDone(ctx, k, seq))
		}
	}
	check := func(t *testing.T, s store.Store) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) { requireGroup(t, s, key(c.name), c.want) })
		}
	}
	check(t, s)
	require.NoError(t, s.MarkAttempt(ctx, key("new group"), 4, 1))
	requireGroup(t, s, key("new group"), store.GroupState{Floor: 5}) // an attempt at or below the floor is a no-op

	if gp, ok := s.(store.GroupPruner); ok {
		raised, same := store.GroupKey{Subject: "p", Group: "raised"}, store.GroupKey{Subject: "p", Group: "same"}
		require.NoError(t, s.MarkDone(ctx, raised, 1))
		require.NoError(t, s.MarkDone(ctx, same, 1))
		mark := between()
		require.NoError(t, fr.RaiseFloor(ctx, raised, 3))
		require.NoError(t, fr.RaiseFloor(ctx, same, 1))
		n, err := gp.PruneGroups(ctx, "p", mark, func(string) bool { return false })
		require.NoError(t, err)
		require.Equal(t, 1, n, "a raise is a write; a raise to the floor is not")
		requireGroup(t, s, raised, store.GroupState{Floor: 3})
		requireGroup(t, s, same, store.GroupState{})
	}
	if su.f.Reopen != nil {
		t.Run("AfterReopen", func(t *testing.T) { check(t, su.reopen(t, s)) })
	}
}

// testListGroups: ListGroups gives the stored state of a subject's groups,
// pull cursors included, other subjects' left out, at most max of them;
// a pruned group is not listed, and the listing survives a reopen.
func (su *suite) testListGroups(t *testing.T) {
	s := su.store(t)
	gl, ok := s.(store.GroupLister)
	if !ok {
		t.Skip("store does not implement store.GroupLister")
	}
	ctx := t.Context()
	key := func(subject, group string) store.GroupKey { return store.GroupKey{Subject: subject, Group: group} }
	list := func(t *testing.T, s store.Store, subject string, max int) map[string]store.GroupState {
		t.Helper()
		gs, err := s.(store.GroupLister).ListGroups(ctx, subject, max)
		require.NoError(t, err)
		for name, g := range gs {
			gs[name] = normGroup(g)
		}
		return gs
	}

	require.Empty(t, list(t, s, "s", 0), "an unknown subject")
	for _, seq := range []uint64{1, 2, 4} {
		require.NoError(t, s.MarkDone(ctx, key("s", "work"), seq))
	}
	require.NoError(t, s.MarkAttempt(ctx, key("s", "work"), 3, 2))
	require.NoError(t, s.MarkDone(ctx, key("s", "cursor:alice"), 1))
	require.NoError(t, s.MarkAttempt(ctx, key("s", "tried"), 1, 1))
	require.NoError(t, s.MarkDone(ctx, key("s.deeper", "other"), 1))
	require.NoError(t, s.MarkDone(ctx, key("t", "other"), 1))
	want := map[string]store.GroupState{
		"work":         {Floor: 2, Done: []uint64{4}, Attempts: map[uint64]int{3: 2}},
		"cursor:alice": {Floor: 1},
		"tried":        {Attempts: map[uint64]int{1: 1}},
	}
	require.Equal(t, want, list(t, s, "s", 0))
	require.Equal(t, want, list(t, s, "s", -1), "max < 0 is no limit")

	two := list(t, s, "s", 2)
	require.Len(t, two, 2, "at most max")
	for name, g := range two {
		require.Equal(t, want[name], g, name)
	}

	got, err := gl.ListGroups(ctx, "s", 0)
	require.NoError(t, err)
	g := got["work"]
	g.Done[0] = 99
	g.Attempts[3] = 99
	require.Equal(t, want, list(t, s, "s", 0), "the listing is a copy")

	if gp, ok := s.(store.GroupPruner); ok {
		_, err := gp.PruneGroups(ctx, "s", time.Now().Add(time.Hour), func(g string) bool { return g != "tried" })
		require.NoError(t, err)
		delete(want, "tried")
		require.Equal(t, want, list(t, s, "s", 0), "a pruned group is not listed")
	}
	if su.f.Reopen != nil {
		s = su.reopen(t, s)
		require.Equal(t, want, list(t, s, "s", 0), "after a reopen")
	}
}

// testListGroupSubjects: ListGroupSubjects names each subject with stored
// progress once (a group with only an attempt, a pull cursor, a subject
// that is a prefix of another's name), and no longer names a subject
// whose groups were all pruned; the listing survives a reopen.
func (su *suite) testListGroupSubjects(t *testing.T) {
	s := su.store(t)
	if _, ok := s.(store.GroupSubjectLister); !ok {
		t.Skip("store does not implement store.GroupSubjectLister")
	}
	ctx := t.Context()
	key := func(subject, group string) store.GroupKey { return store.GroupKey{Subject: subject, Group: group} }
	list := func(t *testing.T, s store.Store) []string {
		t.Helper()
		subjects, err := s.(store.GroupSubjectLister).ListGroupSubjects(ctx)
		require.NoError(t, err)
		return subjects
	}

	require.Empty(t, list(t, s), "no progress yet")
	_, _, err := s.Append(ctx, message("quiet", "m1", base))
	require.NoError(t, err)
	require.Empty(t, list(t, s), "messages without a group")
	for _, seq := range []uint64{1, 2} {
		require.NoError(t, s.MarkDone(ctx, key("s", "work"), seq))
	}
	require.NoError(t, s.MarkDone(ctx, key("s", "cursor:alice"), 1))
	require.NoError(t, s.MarkAttempt(ctx, key("s.deeper", "tried"), 1, 1))
	require.NoError(t, s.MarkDone(ctx, key("t", "gone"), 1))
	require.ElementsMatch(t, []string{"s", "s.deeper", "t"}, list(t, s))

	want := []string{"s", "s.deeper", "t"}
	if gp, ok := s.(store.GroupPruner); ok {
		n, err := gp.PruneGroups(ctx, "t", time.Now().Add(time.Hour), func(string) bool { return false })
		require.NoError(t, err)
		require.Equal(t, 1, n)
		want = []string{"s", "s.deeper"}
		require.ElementsMatch(t, want, list(t, s), "a subject with every group pruned is not named")
	}
	if su.f.Reopen != nil {
		s = su.reopen(t, s)
		require.ElementsMatch(t, want, list(t, s), "after a reopen")
	}
}

// testListMessageSubjects: ListMessageSubjects names each subject that
// holds a message once (a subject that is a prefix of another's name
// included), never a subject with only consumer progress, and goes on
// naming a subject trimmed down to one message; a subject whose every
// message was trimmed may be named, and then its Bounds say it is empty.
// The listing survives a reopen.
func (su *suite) testListMessageSubjects(t *testing.T) {
	s := su.store(t)
	if _, ok := s.(store.MessageSubjectLister); !ok {
		t.Skip("store does not implement store.MessageSubjectLister")
	}
	ctx := t.Context()
	// check requires the listing to name each of want once and, beside
	// them, only subjects of maybe that Bounds finds empty.
	check := func(t *testing.T, s store.Store, want []string, maybe ...string) {
		t.Helper()
		got, err := s.(store.MessageSubjectLister).ListMessageSubjects(ctx)
		require.NoError(t, err)
		seen := map[string]bool{}
		for _, name := range got {
			require.False(t, seen[name], "%q named twice", name)
			seen[name] = true
		}
		for _, name := range want {
			require.True(t, seen[name], "%q holds messages: named", name)
			delete(seen, name)
		}
		for name := range seen {
			require.Contains(t, maybe, name, "%q named", name)
			first, last, err := s.Bounds(ctx, name)
			require.NoError(t, err)
			require.Greater(t, first, last, "%q named without a message: its every message was trimmed", name)
		}
	}

	check(t, s, nil)
	require.NoError(t, s.MarkDone(ctx, store.GroupKey{Subject: "progress.only", Group: "g"}, 1))
	check(t, s, nil)
	appendAll(t, s,
		message("s", "m1", at(0)), message("s", "m2", at(time.Second)),
		message("s.deeper", "m3", at(0)),
		message("gone", "m4", at(0)), message("gone", "m5", at(time.Second)),
		message("Ünïcode subject/with:odd chars", "m6", at(0)))
	all := []string{"s", "s.deeper", "gone", "Ünïcode subject/with:odd chars"}
	check(t, s, all)

	want := all
	if st, ok := s.(store.SeqTrimmer); ok {
		n, err := st.TrimThrough(ctx, "s", 1)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		n, err = st.TrimThrough(ctx, "gone", 2)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		want = []string{"s", "s.deeper", "Ünïcode subject/with:odd chars"}
		check(t, s, want, "gone")
	}
	if su.f.Reopen != nil {
		s = su.reopen(t, s)
		check(t, s, want, "gone")
	}
}
