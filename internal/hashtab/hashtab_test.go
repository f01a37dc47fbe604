package hashtab

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

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

// TestGrowsIncrementally: once a table starts growing, each insert moves
// at least moveStep slots of the old table and stops only at an empty one,
// so that clusters there stay whole; meanwhile every value is found
// exactly once, values in either table can be removed, and the old table
// is dropped once it has moved.
func TestGrowsIncrementally(t *testing.T) {
	var tab Table[uint64]
	h := func(v uint64) uint64 { return v * 0x9E3779B97F4A7C15 }
	n := uint64(0)
	for tab.old == nil {
		n++
		tab.Insert(h(n), n)
	}
	require.Equal(t, int(n), tab.Len())
	require.Zero(t, tab.old[tab.start].h, "the move starts at an empty slot")
	removed := map[uint64]bool{}
	fromOld := 0
	for steps := 0; tab.old != nil; steps++ {
		before := tab.done
		n++
		tab.Insert(h(n), n)
		if tab.old != nil {
			require.GreaterOrEqual(t, tab.done-before, moveStep)
			require.Zero(t, tab.old[(tab.start+tab.done)%len(tab.old)].h, "a move stops at an empty slot")
		}
		// Remove values of the old table and of the new, by turns.
		if v := uint64(steps*7)%(n-1) + 1; !removed[v] {
			i := tab.Lookup(h(v), func(x *uint64) bool { return *x == v })
			require.GreaterOrEqual(t, i, 0, "value %d", v)
			if i >= tab.Cap() {
				fromOld++
			}
			tab.RemoveAt(i)
			removed[v] = true
		}
		if steps%5 == 0 {
			for v := uint64(1); v <= n; v++ {
				got := values(&tab, h(v))
				if removed[v] {
					require.Empty(t, got, "value %d was removed", v)
				} else {
					require.Equal(t, []uint64{v}, got, "value %d once, mid-move", v)
				}
			}
		}
	}
	require.Positive(t, fromOld, "some removals hit the old table")
	require.Equal(t, int(n)-len(removed), tab.Len())
	for v := uint64(1); v <= n; v++ {
		if !removed[v] {
			require.Equal(t, []uint64{v}, values(&tab, h(v)))
		}
	}
}

// TestFindOrInsert: FindOrInsert finds a value already stored under a hash
// (in the new table or, mid-growth, the old one) and inserts otherwise,
// as Lookup then Insert would; the slot it returns holds that value.
func TestFindOrInsert(t *testing.T) {
	var tab Table[uint64]
	ref := map[uint64]uint64{}
	r := rand.New(rand.NewPCG(3, 4))
	sawOld := false
	for step := range 20_000 {
		h := r.Uint64N(8_000) + 1
		if step%3 == 0 {
			h = 0 // stored as 1: the empty mark
		}
		sawOld = sawOld || tab.old != nil
		i, found := tab.FindOrInsert(h, uint64(step))
		want, had := ref[fix(h)]
		require.Equal(t, had, found, "step %d", step)
		if had {
			require.Equal(t, want, *tab.At(i), "step %d", step)
			continue
		}
		require.Equal(t, uint64(step), *tab.At(i), "step %d", step)
		ref[fix(h)] = uint64(step)
		require.Equal(t, len(ref), tab.Len())
	}
	require.True(t, sawOld, "some calls came while the table grew")
	for h, v := range ref {
		require.Equal(t, []uint64{v}, values(&tab, h))
	}
}

// TestSpare: a table close to growing asks for a spare of the size it will
// grow to, and grows into the spare it is given, whose pages are already
// written; a spare of another size is dropped, and a small table asks for
// none.
func TestSpare(t *testing.T) {
	var tab Table[uint64]
	h := func(v uint64) uint64 { return v * 0x9E3779B97F4A7C15 }
	n := uint64(0)
	for tab.SpareWanted() == 0 {
		n++
		tab.Insert(h(n), n)
		if tab.Cap() < spareFrom/2 {
			require.Zero(t, tab.SpareWanted(), "a small table wants no spare")
		}
	}
	require.Equal(t, 2*tab.Cap(), tab.SpareWanted())
	require.GreaterOrEqual(t, tab.Len()*4, tab.Cap()*3, "asked for at 75%")
	require.Less(t, tab.Len()*5, tab.Cap()*4, "before the table grows")

	tab.SetSpare(NewSpare[uint64](tab.Cap())) // not the size it grows to
	require.Nil(t, tab.spare)
	spare := NewSpare[uint64](tab.SpareWanted())
	tab.SetSpare(spare)
	require.Zero(t, tab.SpareWanted(), "it has one")
	cap0 := tab.Cap()
	for tab.Cap() == cap0 {
		n++
		tab.Insert(h(n), n)
	}
	require.Same(t, &spare.slots[0], &tab.slots[0], "the table grew into the spare")
	require.Nil(t, tab.spare)
	for v := uint64(1); v <= n; v++ {
		require.Equal(t, []uint64{v}, values(&tab, h(v)))
	}
}

// BenchmarkInsertWorst is the slowest single insert while a table fills to
// 4M values: the pause a grow costs whoever triggers it.
func BenchmarkInsertWorst(b *testing.B) {
	for b.Loop() {
		var tab Table[uint64]
		var worst time.Duration
		for v := uint64(1); v <= 4<<20; v++ {
			t0 := time.Now()
			tab.Insert(v*0x9E3779B97F4A7C15, v)
			worst = max(worst, time.Since(t0))
		}
		b.ReportMetric(float64(worst.Microseconds()), "worst-µs")
	}
}
