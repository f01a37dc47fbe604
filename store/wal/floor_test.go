package wal

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/internal/testclock"
	"pigeon/store"
)

// TestRaiseFloorReplays: a floor-raised record gives the same state and
// write time after a reopen, replayed from the meta log or kept in a
// snapshot, and a groups-pruned record that looked before it spares the
// group, when it commits and on replay.
func TestRaiseFloorReplays(t *testing.T) {
	for _, compact := range []bool{false, true} {
		t.Run(map[bool]string{false: "log", true: "snapshot"}[compact], func(t *testing.T) {
			dir := t.TempDir()
			clk := testclock.New(base)
			opts := &Options{Now: clk.Now}
			s := open(t, dir, opts)
			ctx := t.Context()
			raised, idle := store.GroupKey{Subject: "a", Group: "raised"}, store.GroupKey{Subject: "a", Group: "idle"}
			require.NoError(t, s.MarkDone(ctx, idle, 1))
			for _, seq := range []uint64{2, 7, 9} {
				require.NoError(t, s.MarkDone(ctx, raised, seq))
			}
			require.NoError(t, s.MarkAttempt(ctx, raised, 4, 2))
			require.NoError(t, s.MarkAttempt(ctx, raised, 10, 1))
			looked := metaApplied(s)
			clk.Advance(time.Hour)
			mark := clk.Now()
			require.NoError(t, s.RaiseFloor(ctx, raised, 6)) // after the look
			before := metaApplied(s)
			require.NoError(t, s.RaiseFloor(ctx, raised, 5), "below the floor")
			require.NoError(t, s.RaiseFloor(ctx, idle, 0), "zero")
			require.Equal(t, before, metaApplied(s), "a raise that changes nothing writes no record")

			n, err := s.metaWrite(encPruned("a", looked, []string{"raised", "idle"}))
			require.NoError(t, err)
			require.Equal(t, 1, n, "the raise after the look spares its group")
			want := store.GroupState{Floor: 7, Done: []uint64{9}, Attempts: map[uint64]int{10: 1}}
			requireGroupState(t, s, raised, want)
			requireGroupState(t, s, idle, store.GroupState{})
			if compact {
				require.NoError(t, s.compactMeta())
			}
			require.NoError(t, s.Close(ctx))

			clk.Advance(time.Hour)
			s = open(t, dir, opts)
			requireGroupState(t, s, raised, want)
			requireGroupState(t, s, idle, store.GroupState{})
			n, err = s.PruneGroups(ctx, "a", mark, never)
			require.NoError(t, err)
			require.Zero(t, n, "the raise's write time survives the reopen")
			require.NoError(t, s.MarkDone(ctx, raised, 8))
			requireGroupState(t, s, raised, store.GroupState{Floor: 9, Attempts: map[uint64]int{10: 1}})
		})
	}
}
