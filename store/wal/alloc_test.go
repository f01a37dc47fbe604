package wal

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestAppendAcceptedAllocs: an accepted message costs the store one
// allocation, its write request with the acceptance record it keeps; the
// record's buffer comes from a pool, sized once, the queue of writes
// reuses the array of the batch before, and the acceptance's sequence is
// written by the accept flusher, per batch. The flusher is held off (its
// linger is an hour) so that only the appends are counted.
func TestAppendAcceptedAllocs(t *testing.T) {
	s := open(t, t.TempDir(), &Options{Sync: SyncNone, faults: &faults{linger: time.Hour}})
	ctx := context.Background()
	const n = 1000
	ms := make([]store.Message, n+1)
	for i := range ms {
		ms[i] = msg("allocs", fmt.Sprintf("m-%d", i), at(time.Duration(i)*time.Millisecond))
		ms[i].IdemKey = fmt.Sprintf("k-%d", i)
		ms[i].IdemExpires = ms[i].Time.Add(time.Hour)
	}
	acc := acceptance("p")
	i := 0
	allocs := testing.AllocsPerRun(n, func() {
		if _, _, err := s.AppendAccepted(ctx, ms[i], acc); err != nil {
			t.Error(err)
		}
		i++
	})
	// 1 in a normal build; under the race detector, sync.Pool drops a
	// buffer now and then.
	require.LessOrEqual(t, allocs, 2.0, "allocations per AppendAccepted")
}
