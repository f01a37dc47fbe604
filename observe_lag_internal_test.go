package pigeon

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestLagOfIgnoresDoneBeyondLast: Stats reads a subject's bounds before
// each group's progress, so messages published and acked between the two
// reads are in Done but past last. They are not lag, and must not be
// taken off the lag of the messages up to last: the lag of 10 (pending)
// with 11 and 12 done was 1-2, wrapped to 2^64-1, a consumer_lag gauge
// of 1.8e19 that fires every lag alert.
func TestLagOfIgnoresDoneBeyondLast(t *testing.T) {
	for _, c := range []struct {
		p           store.GroupState
		first, last uint64
		want        uint64
	}{
		{store.GroupState{Floor: 9, Done: []uint64{11, 12}}, 1, 10, 1},
		{store.GroupState{Floor: 5, Done: []uint64{7, 11, 12}}, 1, 10, 4},
		{store.GroupState{Floor: 5, Done: []uint64{7, 9}}, 1, 10, 3},
		{store.GroupState{Floor: 5, Done: []uint64{2, 7}}, 6, 10, 4}, // done below first: trimmed
		{store.GroupState{Floor: 10}, 1, 10, 0},
		{store.GroupState{Floor: 12, Done: []uint64{14}}, 1, 10, 0},
		{store.GroupState{Done: []uint64{1, 2, 3}}, 1, 3, 0},
	} {
		require.Equal(t, c.want, lagOf(&c.p, c.first, c.last), "%+v %d..%d", c.p, c.first, c.last)
	}
}
