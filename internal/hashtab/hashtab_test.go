package hashtab

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// values returns every value stored under h, sorted.
func values(t *Table[uint64], h uint64) []uint64 {
	var out []uint64
	t.Lookup(h, func(v *uint64) bool {
		out = append(out, *v)
		return false
	})
	slices.Sort(out)
	return out
}

// The table against a reference multi-map, with few distinct hashes so
// that clusters, collisions and wrap-around are common.
func TestTable(t *testing.T) {
	var tab Table[uint64]
	ref := map[uint64][]uint64{}
	r := rand.New(rand.NewPCG(1, 2))
	check := func(step int) {
		n := 0
		for h, want := range ref {
			w := slices.Clone(want)
			slices.Sort(w)
			if len(w) == 0 {
				w = nil
			}
			require.Equal(t, w, values(&tab, h), "hash %d after %d steps", h, step)
			n += len(want)
		}
		require.Equal(t, n, tab.Len())
	}
	for i := range 100000 {
		h := r.Uint64N(3000) * 0x9E3779B97F4A7C15 // few distinct hashes, spread out
		switch {
		case h == 0:
			h = ^uint64(0) // homes to the last slot: clusters wrap around
		case h == 1:
			h = 0 // stored as 1: must not be confused with an empty slot
		}
		switch op := r.IntN(1000); {
		case op < 600 || len(ref[h]) == 0:
			loc := uint64(i)
			tab.Insert(h, loc)
			ref[h] = append(ref[h], loc)
		case op < 998:
			locs := ref[h]
			k := r.IntN(len(locs))
			j := tab.Lookup(h, func(v *uint64) bool { return *v == locs[k] })
			require.GreaterOrEqual(t, j, 0)
			require.Equal(t, locs[k], *tab.At(j))
			tab.RemoveAt(j)
			ref[h] = slices.Delete(locs, k, k+1)
		default:
			_ = tab.Touch(h)
			odd := func(v *uint64) bool { return *v%2 == 1 }
			tab.KeepOnly(odd)
			for h, locs := range ref {
				ref[h] = slices.DeleteFunc(locs, func(v uint64) bool { return !odd(&v) })
			}
		}
		if i%997 == 0 {
			check(i)
		}
	}
	check(-1)
	require.Equal(t, -1, tab.Lookup(12345678, func(*uint64) bool { return true }))
}

func TestEmptyTable(t *testing.T) {
	var tab Table[int]
	require.Equal(t, -1, tab.Lookup(1, func(*int) bool { return true }))
	require.Zero(t, tab.Touch(1))
	tab.KeepOnly(func(*int) bool { return true })
	require.Zero(t, tab.Len())
	tab.Reserve(10)
	require.GreaterOrEqual(t, tab.Cap(), 14)
}
