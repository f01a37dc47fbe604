package wal

import (
	"fmt"
	"hash/maphash"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// idemScript appends, looks up, trims and reopens, and returns what every
// step answered. Run with every hash colliding, it must answer as it does
// with the real hash: correctness may never rest on hashes not colliding.
func idemScript(t *testing.T) []string {
	dir := t.TempDir()
	s := open(t, dir, nil)
	ctx := t.Context()
	var out []string
	put := func(subject, id, key string, d, ttl time.Duration) {
		m := msg(subject, id, at(d))
		if key != "" {
			m.IdemKey, m.IdemExpires = key, at(d+ttl)
		}
		got, dup, err := s.Append(ctx, m)
		require.NoError(t, err)
		out = append(out, fmt.Sprintf("append %s/%s key=%q: seq=%d dup=%v id=%s", subject, id, key, got.Seq, dup, got.ID))
	}
	look := func(id string) {
		m, err := s.Lookup(ctx, id)
		out = append(out, fmt.Sprintf("lookup %s: %s %d %v", id, m.ID, m.Seq, err))
	}
	put("a", "a1", "k1", 0, time.Hour)
	put("a", "a2", "k2", time.Second, time.Hour)
	put("b", "b1", "k3", 2*time.Second, time.Hour)
	put("a", "a3", "k1", 3*time.Second, time.Hour) // duplicate of a1
	put("b", "b2", "k2", 4*time.Second, time.Hour) // duplicate of a2, across subjects
	put("b", "b3", "", 5*time.Second, 0)
	put("a", "a4", "k4", 6*time.Second, 10*time.Second)
	put("a", "a5", "k4", 20*time.Second, time.Hour) // k4 expired: a new claim
	put("a", "a6", "k4", 21*time.Second, time.Hour) // duplicate of a5

	// Concurrent appends: one original per key, every other a duplicate.
	var wg sync.WaitGroup
	var mu sync.Mutex
	origs := map[string]int{}
	for i := range 24 {
		wg.Go(func() {
			key := fmt.Sprint("c", i%4)
			m := msg("c", fmt.Sprint("c-", i), at(30*time.Second))
			m.IdemKey, m.IdemExpires = key, at(time.Hour)
			_, dup, err := s.Append(ctx, m)
			require.NoError(t, err)
			if !dup {
				mu.Lock()
				origs[key]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	out = append(out, fmt.Sprint("concurrent originals: ", origs))

	for _, id := range []string{"a1", "a2", "a3", "b1", "b3", "a5", "nope"} {
		look(id)
	}
	n, err := s.TrimBefore(ctx, "a", at(time.Second)) // drops a1; its live claim of k1 stays, with a kept copy
	require.NoError(t, err)
	out = append(out, fmt.Sprint("trimmed ", n))
	put("a", "a7", "k7", 40*time.Second, time.Hour)
	put("a", "a1-retry", "k1", 40*time.Second, time.Hour) // still a1's
	put("b", "b4", "k3", 41*time.Second, time.Hour)       // still b1's

	require.NoError(t, s.Close(ctx))
	s = open(t, dir, nil)
	put("a", "a8", "k7", 42*time.Second, time.Hour)      // a7's, across a restart
	put("a", "a1-late", "k1", 42*time.Second, time.Hour) // still a1's: its kept copy survived the restart
	put("a", "a9", "k2", 43*time.Second, time.Hour)      // a2's
	put("a", "a10", "k9", 44*time.Second, time.Hour)
	for _, id := range []string{"a2", "a7", "b1", "a10"} {
		look(id)
	}
	return out
}

func TestIdempotencyUnderHashCollisions(t *testing.T) {
	want := idemScript(t)
	defer func(h func(maphash.Seed, string) uint64) { indexHash = h }(indexHash)
	for _, h := range []uint64{0, 42} {
		indexHash = func(maphash.Seed, string) uint64 { return h }
		require.Equal(t, want, idemScript(t), "every hash %d", h)
	}
	require.Contains(t, want, `append a/a3 key="k1": seq=1 dup=true id=a1`)
	require.Contains(t, want, `append a/a8 key="k7": seq=5 dup=true id=a7`)
	require.Contains(t, want, `append a/a1-retry key="k1": seq=1 dup=true id=a1`)
	require.Contains(t, want, `append a/a1-late key="k1": seq=1 dup=true id=a1`)
	require.Contains(t, want, "concurrent originals: map[c0:1 c1:1 c2:1 c3:1]")
}

// A store with many live keys keeps them in the pointer-free index and
// drops expired ones as it goes.
func TestIdempotencyIndexSweeps(t *testing.T) {
	s := open(t, t.TempDir(), &Options{Sync: SyncNone})
	ctx := t.Context()
	for i := range 5000 {
		m := msg("a", fmt.Sprint("m", i), at(time.Duration(i)*time.Second))
		m.IdemKey, m.IdemExpires = fmt.Sprint("k", i), at(time.Duration(i)*time.Second+time.Minute)
		_, dup, err := s.Append(ctx, m)
		require.NoError(t, err)
		require.False(t, dup)
	}
	x := &s.msgs.idx
	x.mu.Lock()
	n, pending := x.idem.Len(), len(x.pending)
	x.mu.Unlock()
	require.Less(t, n, 2100, "expired claims are swept")
	require.Zero(t, pending, "committed claims leave pending")
	m := msg("a", "again", at(4999*time.Second))
	m.IdemKey, m.IdemExpires = "k4990", at(5000*time.Second)
	got, dup, err := s.Append(ctx, m)
	require.NoError(t, err)
	require.True(t, dup)
	require.Equal(t, "m4990", got.ID)
}

// A retry that finds its key's claim on a message that retention has just
// removed without keeping a copy (over the kept budget), before the trim
// has dropped the claim, is a new message: the claim goes with the
// message. It used to retry the same claim until it gave up with an
// error ("idempotency key kept changing"), failing the publish.
func TestRetryDuringTrimOfUnkeptOriginal(t *testing.T) {
	defer func(n int) { maxKeptBytes = n }(maxKeptBytes)
	maxKeptBytes = 0 // no copies: a trimmed message's claim goes with it
	ctx := t.Context()
	s := open(t, t.TempDir(), fast)
	m := msg("a", "orig", at(0))
	m.IdemKey, m.IdemExpires = "k", at(time.Hour)
	_, _, err := s.Append(ctx, m)
	require.NoError(t, err)
	_, _, err = s.Append(ctx, msg("a", "next", at(time.Second)))
	require.NoError(t, err)
	// The trim's window: the original is cut from the log, its claim not
	// yet dropped.
	sub, _ := s.subject("a", false)
	require.NoError(t, sub.w.truncateFront(2))

	r := msg("a", "retry", at(2*time.Second))
	r.IdemKey, r.IdemExpires = "k", at(time.Hour)
	got, dup, err := s.Append(ctx, r)
	require.NoError(t, err)
	require.False(t, dup)
	require.Equal(t, uint64(3), got.Seq)
	again, dup, err := s.Append(ctx, r)
	require.NoError(t, err)
	require.True(t, dup, "the retry holds the key now")
	require.Equal(t, "retry", again.ID)
}
