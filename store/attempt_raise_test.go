package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestGroupStateMarkAttemptRaises: GroupState.MarkAttempt, which every
// backend applies its MarkAttempt writes with (store/wal's replay and
// store/jetstream's compare-and-set included), keeps the larger of the
// attempt recorded and the one written, and reports whether it changed
// the state; lowering is LowerAttempt's.
func TestGroupStateMarkAttemptRaises(t *testing.T) {
	for _, tc := range []struct {
		name    string
		from    map[uint64]int
		n       int
		changed bool
		want    map[uint64]int
	}{
		{name: "first", n: 1, changed: true, want: map[uint64]int{2: 1}},
		{name: "raised", from: map[uint64]int{2: 1}, n: 3, changed: true, want: map[uint64]int{2: 3}},
		{name: "a late lower attempt", from: map[uint64]int{2: 3}, n: 2, want: map[uint64]int{2: 3}},
		{name: "the same attempt", from: map[uint64]int{2: 3}, n: 3, want: map[uint64]int{2: 3}},
		{name: "none", n: 0},
		{name: "negative", from: map[uint64]int{2: 1}, n: -1, want: map[uint64]int{2: 1}},
		{name: "another sequence", from: map[uint64]int{5: 7}, n: 1, changed: true, want: map[uint64]int{2: 1, 5: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := store.GroupState{Attempts: tc.from}
			g = g.Clone()
			require.Equal(t, tc.changed, g.RaisesAttempt(2, tc.n), "RaisesAttempt")
			require.Equal(t, tc.changed, g.MarkAttempt(2, tc.n), "MarkAttempt")
			require.Equal(t, tc.want, g.Clone().Attempts)
		})
	}

	t.Run("LowerAttemptStillLowers", func(t *testing.T) {
		var g store.GroupState
		g.MarkAttempt(2, 3)
		require.NoError(t, g.LowerAttempt(2, 3, 1))
		require.Equal(t, map[uint64]int{2: 1}, g.Attempts)
		require.True(t, g.MarkAttempt(2, 2), "raised again from the lowered count")
		require.Equal(t, map[uint64]int{2: 2}, g.Attempts)
	})

	t.Run("Done", func(t *testing.T) {
		g := store.GroupState{Floor: 2, Done: []uint64{4}}
		require.False(t, g.MarkAttempt(2, 1), "at the floor")
		require.False(t, g.MarkAttempt(4, 1), "done above the floor")
		require.Nil(t, g.Attempts)
	})
}
