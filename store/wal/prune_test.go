package wal

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/internal/testclock"
	"pigeon/store"
)

func never(string) bool { return false }

// legacyDone encodes MarkDone as the store wrote it before progress
// records carried their time.
func legacyDone(key store.GroupKey, seq uint64) []byte {
	e := newEnc(kindDone, 32)
	e.str(key.Subject)
	e.str(key.Group)
	e.uvarint(seq)
	return e.finish()
}

func requireGroupState(t *testing.T, s *Store, key store.GroupKey, want store.GroupState) {
	t.Helper()
	got, err := s.LoadGroup(t.Context(), key)
	require.NoError(t, err)
	if len(got.Attempts) == 0 {
		got.Attempts = nil
	}
	require.Equal(t, want, got, "%v", key)
}

// TestPruneGroupsTimesSurviveReopen: a group's write time comes back
// after a reopen, from the meta log and from a snapshot alike.
func TestPruneGroupsTimesSurviveReopen(t *testing.T) {
	for _, compact := range []bool{false, true} {
		t.Run(map[bool]string{false: "log", true: "snapshot"}[compact], func(t *testing.T) {
			dir := t.TempDir()
			clk := testclock.New(base)
			start := clk.Now()
			opts := &Options{Now: clk.Now}
			s := open(t, dir, opts)
			ctx := t.Context()
			old, fresh := store.GroupKey{Subject: "a", Group: "old"}, store.GroupKey{Subject: "a", Group: "fresh"}
			require.NoError(t, s.MarkDone(ctx, old, 1))
			clk.Advance(time.Hour)
			require.NoError(t, s.MarkAttempt(ctx, fresh, 1, 1))
			if compact {
				require.NoError(t, s.compactMeta())
			}
			require.NoError(t, s.Close(ctx))
			clk.Advance(time.Hour)

			s = open(t, dir, opts)
			n, err := s.PruneGroups(ctx, "a", start.Add(time.Hour), never)
			require.NoError(t, err)
			require.Equal(t, 1, n, "only the group written before the cut, an hour before the reopen")
			requireGroupState(t, s, old, store.GroupState{})
			requireGroupState(t, s, fresh, store.GroupState{Attempts: map[uint64]int{1: 1}})
		})
	}
}

// TestPruneGroupsLegacyState: progress written before the store kept
// write times, in the meta log or in a snapshot, counts as written when
// the store opened: nothing goes early.
func TestPruneGroupsLegacyState(t *testing.T) {
	dir := t.TempDir()
	clk := testclock.New(base)
	opts := &Options{Now: clk.Now}
	logged, snapped := store.GroupKey{Subject: "a", Group: "logged"}, store.GroupKey{Subject: "a", Group: "snapped"}
	s := open(t, dir, opts)
	_, err := s.metaWrite(legacyDone(logged, 1))
	require.NoError(t, err)
	require.NoError(t, s.Close(t.Context()))
	// A snapshot as older versions wrote it: covering no log entry, with
	// one group state without a time.
	hdr := newEnc(kindSnapshot, 8)
	hdr.uvarint(0)
	g := newEnc(kindGroupState, 32)
	g.str(snapped.Subject)
	g.str(snapped.Group)
	g.uvarint(3) // floor
	g.uvarint(0) // done
	g.uvarint(0) // attempts
	require.NoError(t, writeFileAtomic(s.snapshotPath(), frame(frame(nil, hdr.finish()), g.finish())))

	clk.Advance(24 * time.Hour)
	opened := clk.Now()
	s = open(t, dir, opts)
	ctx := t.Context()
	requireGroupState(t, s, logged, store.GroupState{Floor: 1})
	requireGroupState(t, s, snapped, store.GroupState{Floor: 3})
	n, err := s.PruneGroups(ctx, "a", opened, never)
	require.NoError(t, err)
	require.Zero(t, n, "legacy state counts as written when the store opened")

	clk.Advance(time.Minute)
	require.NoError(t, s.compactMeta()) // the open time is kept from now on
	require.NoError(t, s.Close(ctx))
	clk.Advance(time.Hour)
	s = open(t, dir, opts)
	n, err = s.PruneGroups(ctx, "a", opened.Add(time.Millisecond), never)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	requireGroupState(t, s, logged, store.GroupState{})
	requireGroupState(t, s, snapped, store.GroupState{})
}

// TestPrunedRecordSparesLaterWrites: a prune record deletes a group only
// if no record after the index it names wrote the group, when it commits
// and when it is replayed, so a write that lands between PruneGroups'
// look and its commit is never lost, and a reopen agrees.
func TestPrunedRecordSparesLaterWrites(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, nil)
	ctx := t.Context()
	busy, idle, looked := writeAfterTheLook(t, s)

	n, err := s.metaWrite(encPruned("a", looked, []string{"busy", "idle", "unknown"}))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	check := func(s *Store) {
		requireGroupState(t, s, busy, store.GroupState{Floor: 2})
		requireGroupState(t, s, idle, store.GroupState{})
	}
	check(s)
	require.NoError(t, s.Close(ctx))
	s = open(t, dir, nil)
	check(s)
}

// TestPrunedRecordAcrossCompaction: a compaction between PruneGroups'
// look and its record is written must not change which groups the record
// deletes on a reopen. The snapshot does not keep the meta index of each
// group's last write, so both the running store and the replay count the
// groups it holds as written at the index it covers: a group is then
// kept rather than deleted, and the next pass prunes it if still unused.
func TestPrunedRecordAcrossCompaction(t *testing.T) {
	cases := []struct {
		name    string
		compact bool
		idle    store.GroupState // after the prune, then after a reopen
	}{
		{"no compaction", false, store.GroupState{}},
		{"compacted between the look and the record", true, store.GroupState{Floor: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, nil)
			ctx := t.Context()
			busy, idle, looked := writeAfterTheLook(t, s)
			if c.compact {
				require.NoError(t, s.compactMeta())
				require.NoError(t, s.Put(ctx, "b", "k", []byte("v"))) // the log goes on after the snapshot
			}
			_, err := s.metaWrite(encPruned("a", looked, []string{"busy", "idle"}))
			require.NoError(t, err)
			requireGroupState(t, s, busy, store.GroupState{Floor: 2})
			ran, err := s.LoadGroup(ctx, idle)
			require.NoError(t, err)
			require.NoError(t, s.Close(ctx))
			s = open(t, dir, nil)
			requireGroupState(t, s, busy, store.GroupState{Floor: 2}) // written after the look: kept
			requireGroupState(t, s, idle, ran)                        // the reopen agrees
			requireGroupState(t, s, idle, c.idle)
		})
	}
}

// writeAfterTheLook writes groups busy and idle of subject "a" in s, takes
// the meta index a PruneGroups pass would look at (looked), and then
// writes busy again, as a subscriber's ack landing after the look would.
func writeAfterTheLook(t *testing.T, s *Store) (busy, idle store.GroupKey, looked uint64) {
	t.Helper()
	ctx := t.Context()
	busy, idle = store.GroupKey{Subject: "a", Group: "busy"}, store.GroupKey{Subject: "a", Group: "idle"}
	require.NoError(t, s.MarkDone(ctx, idle, 1))
	require.NoError(t, s.MarkDone(ctx, busy, 1))
	looked = metaApplied(s)
	require.NoError(t, s.MarkDone(ctx, busy, 2)) // after the look
	return busy, idle, looked
}

// metaApplied is the index of the last meta record s applied: a look
// that a groups-pruned record names.
func metaApplied(s *Store) uint64 {
	s.meta.mu.RLock()
	defer s.meta.mu.RUnlock()
	return s.meta.applied
}
