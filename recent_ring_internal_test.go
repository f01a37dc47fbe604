package pigeon

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRecentRingForgets: forget drops the cached messages before a
// sequence (also one put out of order, before the ring's tail), frees
// their bytes, and keeps a later put of one of them (a store read racing
// the trim) out; the messages from it stay.
func TestRecentRingForgets(t *testing.T) {
	for _, tc := range []struct {
		name  string
		puts  []uint64
		first uint64
		kept  []uint64
	}{
		{"within", []uint64{1, 2, 3, 4, 5}, 4, []uint64{4, 5}},
		{"far past the ring", []uint64{1, 2, 3, 4, 5}, 100 * recentSize, nil},
		{"one before the tail", []uint64{1, recentSize + 900}, 10, []uint64{recentSize + 900}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Engine{}
			now := time.Now()
			for _, seq := range tc.puts {
				e.recent.ring("s").put(&decoded{seq: seq, m: &Message{}, size: 10}, now)
			}
			e.recent.forget("s", tc.first)
			e.recent.forget("unknown", tc.first) // no cache, none made
			require.NotContains(t, e.recent.rings, "unknown")
			r := e.recent.ring("s")
			var kept []uint64
			for _, seq := range tc.puts {
				if e.recentAt("s", seq) != nil {
					kept = append(kept, seq)
				}
			}
			require.Equal(t, tc.kept, kept)
			require.Equal(t, int64(10*len(tc.kept)), r.bytes, "the bytes of what went are freed")
			r.put(&decoded{seq: tc.first - 1, m: &Message{}, size: 10}, now)
			require.Nil(t, e.recentAt("s", tc.first-1), "a trimmed message is not cached again")
			require.Equal(t, int64(10*len(tc.kept)), r.bytes)
		})
	}
}
