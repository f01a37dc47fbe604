package wal

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/internal/testclock"
	"pigeon/store"
)

// TestAttemptRecordsOnlyRaise: an attempt record applied after one of a
// later attempt of the same sequence (a write that committed late, or, in
// a log written before MarkAttempt only raised, a delivery given back)
// leaves the later attempt, when it commits and when it is replayed from
// the log or kept in a snapshot; it still counts as a write of its
// group, so that a groups-pruned record that looked before it spares the
// group on replay as it did when it committed.
func TestAttemptRecordsOnlyRaise(t *testing.T) {
	for _, compact := range []bool{false, true} {
		t.Run(map[bool]string{false: "log", true: "snapshot"}[compact], func(t *testing.T) {
			dir := t.TempDir()
			clk := testclock.New(base)
			opts := &Options{Now: clk.Now}
			s := open(t, dir, opts)
			ctx := t.Context()
			key := store.GroupKey{Subject: "a", Group: "g"}
			require.NoError(t, s.MarkAttempt(ctx, key, 4, 3))
			looked := metaApplied(s)
			clk.Advance(time.Hour)
			_, err := s.metaWrite(encAttempt(key, 4, 2, stampOf(clk.Now())))
			require.NoError(t, err)
			want := store.GroupState{Attempts: map[uint64]int{4: 3}}
			requireGroupState(t, s, key, want)

			n, err := s.metaWrite(encPruned("a", looked, []string{"g"}))
			require.NoError(t, err)
			require.Zero(t, n, "the attempt record after the look spares its group")
			if compact {
				require.NoError(t, s.compactMeta())
			}
			require.NoError(t, s.Close(ctx))

			s = open(t, dir, opts)
			requireGroupState(t, s, key, want)
			require.NoError(t, s.Close(ctx))
		})
	}
}
