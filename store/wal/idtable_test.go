package wal

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// The table against a reference multi-map, with few distinct hashes so
// that clusters, collisions and wrap-around are common.
func TestIDTable(t *testing.T) {
	var tab idTable
	ref := map[uint64][]uint64{}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 100000 {
		h := r.Uint64N(3000) * 0x9E3779B97F4A7C15 // few distinct hashes, spread out
		if h == 0 {
			h = ^uint64(0) // homes to the last slot: clusters wrap around
		}
		if r.IntN(3) > 0 || len(ref[h]) == 0 {
			loc := uint64(i)
			tab.Insert(h, loc)
			ref[h] = append(ref[h], loc)
		} else {
			locs := ref[h]
			k := r.IntN(len(locs))
			tab.remove(h, locs[k])
			ref[h] = slices.Delete(locs, k, k+1)
		}
		if i%997 == 0 {
			for h, want := range ref {
				got := tab.find(h)
				slices.Sort(got)
				w := slices.Clone(want)
				slices.Sort(w)
				if len(w) == 0 {
					w = nil
				}
				require.Equal(t, w, got, "hash %d after %d steps", h, i)
			}
		}
	}
	n := 0
	for _, l := range ref {
		n += len(l)
	}
	require.Equal(t, n, tab.Len())
	tab.remove(12345678, 1) // absent: no-op
	require.Equal(t, n, tab.Len())
}
