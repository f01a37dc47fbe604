package sortedkeys

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// owner is a map under a lock with its Index, as the directory holds its
// accounts: every key added or removed is told to the index.
type owner struct {
	mu sync.RWMutex
	m  map[string]int
	x  Index[int]
}

func newOwner() *owner { return &owner{m: map[string]int{}} }

// put and remove change the map as a writer does, under the lock held.
func (o *owner) put(k string, v int) {
	if _, ok := o.m[k]; !ok {
		o.x.Changed(k)
	}
	o.m[k] = v
}

func (o *owner) remove(k string) {
	delete(o.m, k)
	o.x.Changed(k)
}

// replace puts a new map in place, as a directory read again does.
func (o *owner) replace(m map[string]int) {
	o.m = m
	o.x.Reset()
}

func (o *owner) mapOf() map[string]int { return o.m }

// walk reads, under a read lock, the keys after after, at most n of them
// (n <= 0: every one), with their values.
func (o *owner) walk(after string, n int) (keys []string, vals []int) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return walkWith(o.mu.RLocker(), o, after, n)
}

func walkWith(l sync.Locker, o *owner, after string, n int) (keys []string, vals []int) {
	limit := 0
	if n > 0 {
		limit = n
	}
	o.x.Walk(l, o.mapOf, after, limit, func(k string, v int) bool {
		keys = append(keys, k)
		vals = append(vals, v)
		return n <= 0 || len(keys) < n
	})
	return keys, vals
}

// reference is what a walk must yield: every key of m, sorted, after
// after, the first n (n <= 0: every one), with their values.
func reference(m map[string]int, after string, n int) (keys []string, vals []int) {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k <= after {
			continue
		}
		if n > 0 && len(keys) == n {
			break
		}
		keys = append(keys, k)
		vals = append(vals, m[k])
	}
	return keys, vals
}

// randomKey is a key from a small alphabet, so that keys share prefixes
// and afters fall between, on and around them.
func randomKey(rng *rand.Rand) string {
	b := make([]byte, 1+rng.IntN(4))
	for i := range b {
		b[i] = "abcz"[rng.IntN(4)]
	}
	return string(b)
}

// TestWalkMatchesSortedMap: whatever keys are added, removed or replaced
// between walks (a few, more than MaxChanged, a whole new map), a walk
// yields what sorting the map's keys would, after any cursor (a key held,
// a key removed, one never held, "", one after every key) and with any
// bound on the keys taken, with each key's value as the map holds it then.
func TestWalkMatchesSortedMap(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			o := newOwner()
			for range rng.IntN(300) {
				o.put(randomKey(rng), rng.Int())
			}
			for step := range 200 {
				o.mu.Lock()
				switch r := rng.IntN(100); {
				case r < 45: // a few writes
					for range 1 + rng.IntN(5) {
						k := randomKey(rng)
						if _, ok := o.m[k]; ok && rng.IntN(2) == 0 {
							o.remove(k)
						} else {
							o.put(k, rng.Int()) // a new key, or a value replaced
						}
					}
				case r < 48: // more changes than the index keeps
					for i := range MaxChanged + 1 {
						o.put(fmt.Sprintf("bulk%04d-%d", i, step), i)
					}
				case r < 50: // every key removed
					for k := range o.m {
						o.remove(k)
					}
				case r < 53: // the map replaced
					m := map[string]int{}
					for range rng.IntN(200) {
						m[randomKey(rng)] = rng.Int()
					}
					o.replace(m)
				}
				o.mu.Unlock()

				var after string
				switch r := rng.IntN(6); {
				case r == 0:
				case r == 1:
					after = "zzzzzz" // after every key
				case r < 4 && len(o.m) > 0:
					after = slices.Sorted(maps.Keys(o.m))[rng.IntN(len(o.m))] // a key held
				default:
					after = randomKey(rng) // held or not
				}
				n := rng.IntN(40) - 5 // some without a bound
				keys, vals := o.walk(after, n)
				wantKeys, wantVals := reference(o.m, after, n)
				require.Equal(t, wantKeys, keys, "step %d after %q n %d", step, after, n)
				require.Equal(t, wantVals, vals, "step %d", step)
			}
		})
	}
}

// hookLocker is the owner's lock for reading whose Unlock, once armed,
// runs between with the lock given back: a writer, or another walk, that
// gets in while a walk sorts the keys.
type hookLocker struct {
	mu      *sync.RWMutex
	between func()
	unlocks int
}

func (h *hookLocker) Lock() { h.mu.RLock() }

func (h *hookLocker) Unlock() {
	h.mu.RUnlock()
	h.unlocks++
	if f := h.between; f != nil {
		h.between = nil
		f()
	}
}

// TestWalkSortsWithTheLockGivenBack: a walk that must sort the keys gives
// the owner's lock back while it sorts them, once, and walks the map as it
// is when it takes the lock again: keys added and removed meanwhile (the
// writes that got in) are listed as the map holds them, and kept as
// changed for the walks after, which sort nothing. Past MaxChanged such
// writes, the walk that sorted passes its keys over and scans the map,
// and the next walk sorts them again. A map replaced meanwhile is walked
// as the new one.
func TestWalkSortsWithTheLockGivenBack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes func(o *owner)
		sorts  int // the walks, the first included, that sort the keys
	}{
		{"a few writes", func(o *owner) {
			o.put("b5", 105)
			o.remove("b2")
			o.put("a0", 100)
		}, 1},
		{"more writes than the index keeps", func(o *owner) {
			for i := range MaxChanged + 1 {
				o.put(fmt.Sprintf("c%05d", i), i)
			}
			o.remove("b3")
		}, 2},
		{"the map replaced", func(o *owner) {
			o.replace(map[string]int{"b1": 1, "d": 4, "e": 5})
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newOwner()
			for i := range 8 {
				o.put(fmt.Sprintf("b%d", i), i)
			}
			l := &hookLocker{mu: &o.mu, between: func() {
				o.mu.Lock()
				defer o.mu.Unlock()
				tc.writes(o)
			}}
			o.mu.RLock()
			keys, vals := walkWith(l, o, "a", 0)
			o.mu.RUnlock()
			require.Equal(t, 1, l.unlocks, "the lock is given back once, for the sort")
			wantKeys, wantVals := reference(o.m, "a", 0)
			require.Equal(t, wantKeys, keys)
			require.Equal(t, wantVals, vals)

			for i := 1; i < 3; i++ {
				l.unlocks = 0
				o.mu.RLock()
				keys, _ = walkWith(l, o, "", 0)
				o.mu.RUnlock()
				wantKeys, _ = reference(o.m, "", 0)
				require.Equal(t, wantKeys, keys)
				sorted := 0
				if i < tc.sorts {
					sorted = 1
				}
				require.Equal(t, sorted, l.unlocks, "walk %d sorts the keys again only when the first could not keep them", i+1)
			}
		})
	}
}

// TestWalkWhileAnotherSorts: a walk that finds another sorting the keys
// does not wait for it (it holds the owner's lock for reading, which the
// other needs again): it scans the map for its page, as the listing did
// before the index, and yields the same keys.
func TestWalkWhileAnotherSorts(t *testing.T) {
	o := newOwner()
	for i := range 50 {
		o.put(fmt.Sprintf("k%02d", i), i)
	}
	var inner [2][]string
	l := &hookLocker{mu: &o.mu, between: func() {
		inner[0], _ = o.walk("k09", 5)
		inner[1], _ = o.walk("k45", 0)
	}}
	o.mu.RLock()
	keys, _ := walkWith(l, o, "", 3)
	o.mu.RUnlock()
	require.Equal(t, []string{"k00", "k01", "k02"}, keys)
	require.Equal(t, []string{"k10", "k11", "k12", "k13", "k14"}, inner[0])
	require.Equal(t, []string{"k46", "k47", "k48", "k49"}, inner[1])
}

// TestWalksBesideWriters: walks page through the map while writers add
// and remove keys (run with -race): every page is in order and after its
// cursor, and every key held throughout is listed exactly once by a walk
// that pages from the first key to the last.
func TestWalksBesideWriters(t *testing.T) {
	o := newOwner()
	stable := map[string]bool{}
	for i := range 500 {
		k := fmt.Sprintf("s%04d", i)
		o.put(k, i)
		stable[k] = true
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				o.mu.Lock()
				k := fmt.Sprintf("t%04d", rng.IntN(2000))
				if _, ok := o.m[k]; ok {
					o.remove(k)
				} else {
					o.put(k, 0)
				}
				if rng.IntN(500) == 0 {
					o.replace(maps.Clone(o.m))
				}
				o.mu.Unlock()
			}
		})
	}
	var readers sync.WaitGroup
	for range 3 {
		readers.Go(func() {
			for range 5 {
				seen := map[string]int{}
				after := ""
				for {
					keys, _ := o.walk(after, 37)
					if len(keys) == 0 {
						break
					}
					if !assert.True(t, slices.IsSorted(keys)) || !assert.Greater(t, keys[0], after) {
						return
					}
					for _, k := range keys {
						seen[k]++
					}
					after = keys[len(keys)-1]
				}
				for k := range stable {
					assert.Equal(t, 1, seen[k], "%s listed once", k)
				}
			}
		})
	}
	readers.Wait()
	close(stop)
	wg.Wait()
}
