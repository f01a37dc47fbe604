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

// TestRecentRingKeepsTheNewerOfASlot: a message read from the store for a
// lagging reader, whose slot holds a newer message (the fan-out's, put as
// it was published), leaves the newer one cached and is not cached itself;
// the ring's bytes stay those of what it holds.
func TestRecentRingKeepsTheNewerOfASlot(t *testing.T) {
	e := &Engine{}
	now := time.Now()
	r := e.recent.ring("s")
	newer, older := uint64(recentSize+5), uint64(5)
	r.put(&decoded{seq: newer, m: &Message{}, size: 10}, now)
	r.put(&decoded{seq: older, m: &Message{}, size: 30}, now)
	require.NotNil(t, e.recentAt("s", newer), "the newer message of the slot stays cached")
	require.Nil(t, e.recentAt("s", older))
	require.Equal(t, int64(10), r.bytes)
	r.put(&decoded{seq: newer + recentSize, m: &Message{}, size: 20}, now)
	require.NotNil(t, e.recentAt("s", newer+recentSize), "a newer one still takes the slot")
	require.Equal(t, int64(20), r.bytes)
}
