package store_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

func TestGroupStateMarkDone(t *testing.T) {
	tests := []struct {
		name string
		seqs []uint64
		want store.GroupState
	}{
		{"nothing", nil, store.GroupState{}},
		{"in order", []uint64{1, 2, 3}, store.GroupState{Floor: 3}},
		{"a gap waits in Done", []uint64{1, 3, 5}, store.GroupState{Floor: 1, Done: []uint64{3, 5}}},
		{"out of order, ascending", []uint64{6, 3, 5}, store.GroupState{Done: []uint64{3, 5, 6}}},
		{"filling the gap advances the floor", []uint64{3, 4, 6, 1, 2}, store.GroupState{Floor: 4, Done: []uint64{6}}},
		{"again is a no-op", []uint64{1, 1, 3, 3}, store.GroupState{Floor: 1, Done: []uint64{3}}},
		{"zero is done", []uint64{0}, store.GroupState{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var g store.GroupState
			for _, s := range tc.seqs {
				g.MarkDone(s)
				require.True(t, g.IsDone(s), "%d", s)
			}
			if len(g.Done) == 0 {
				g.Done = nil
			}
			require.Equal(t, tc.want, g)
		})
	}
}

func TestGroupStateRaiseFloor(t *testing.T) {
	tests := []struct {
		name  string
		from  store.GroupState
		floor uint64
		want  store.GroupState
	}{
		{"a new group", store.GroupState{}, 5, store.GroupState{Floor: 5}},
		{"below the floor is a no-op", store.GroupState{Floor: 7, Done: []uint64{9}}, 5, store.GroupState{Floor: 7, Done: []uint64{9}}},
		{"at the floor is a no-op", store.GroupState{Floor: 5, Attempts: map[uint64]int{6: 1}}, 5, store.GroupState{Floor: 5, Attempts: map[uint64]int{6: 1}}},
		{"done at or below go", store.GroupState{Done: []uint64{6, 7, 8, 10}}, 10, store.GroupState{Floor: 10}},
		{"contiguous done above are taken in", store.GroupState{Done: []uint64{3, 6, 7, 9}}, 5, store.GroupState{Floor: 7, Done: []uint64{9}}},
		{"a gap above stays", store.GroupState{Floor: 1, Done: []uint64{3, 8}}, 6, store.GroupState{Floor: 6, Done: []uint64{8}}},
		{"attempts at or below go",
			store.GroupState{Floor: 1, Done: []uint64{4}, Attempts: map[uint64]int{2: 3, 5: 1, 6: 2}}, 5,
			store.GroupState{Floor: 5, Attempts: map[uint64]int{6: 2}}},
		{"to the last sequence there is",
			store.GroupState{Floor: 1, Done: []uint64{4, math.MaxUint64 - 1}, Attempts: map[uint64]int{2: 3}}, math.MaxUint64,
			store.GroupState{Floor: math.MaxUint64}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.from.Clone()
			g.RaiseFloor(tc.floor)
			for s := uint64(0); s <= min(tc.floor, 20); s++ {
				require.True(t, g.IsDone(s), "%d", s)
			}
			require.True(t, g.IsDone(tc.floor))
			g = g.Clone() // empty Done and Attempts as nil
			require.Equal(t, tc.want, g)
		})
	}
}

func TestGroupStateAttempts(t *testing.T) {
	var g store.GroupState
	g.MarkAttempt(2, 1)
	g.MarkAttempt(3, 1)
	g.MarkAttempt(2, 2)
	require.Equal(t, map[uint64]int{2: 2, 3: 1}, g.Attempts)
	g.MarkDone(2)
	require.Equal(t, map[uint64]int{3: 1}, g.Attempts, "done forgets the attempts")
	g.MarkAttempt(2, 3)
	require.Equal(t, map[uint64]int{3: 1}, g.Attempts, "an attempt on a done sequence is a no-op")
	require.False(t, g.IsDone(1))
	require.False(t, g.IsDone(3))
}

func TestGroupStateClone(t *testing.T) {
	g := store.GroupState{Floor: 3, Done: []uint64{5, 7}, Attempts: map[uint64]int{4: 2}}
	c := g.Clone()
	require.Equal(t, g, c)
	c.Done[0], c.Attempts[4] = 6, 9
	require.Equal(t, []uint64{5, 7}, g.Done, "the clone shares no done set")
	require.Equal(t, 2, g.Attempts[4], "the clone shares no attempt counts")
	require.Equal(t, store.GroupState{}, (&store.GroupState{}).Clone())
}
