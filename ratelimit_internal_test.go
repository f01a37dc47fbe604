package pigeon

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// takes counts the tokens k's bucket gives at now, up to 100.
func takes(l *rateLimiter, k rateKey, rp RateLimitPolicy, now time.Time) int {
	n := 0
	for n < 100 && l.take(k, rp, now) {
		n++
	}
	return n
}

// TestRateLimitShare: in a cluster of n live nodes each node's bucket
// holds its share of a limit, rate and burst divided by n (the burst at
// least one token); a change of n keeps what a bucket holds within the
// new share; a replaced policy starts full.
func TestRateLimitShare(t *testing.T) {
	rp := RateLimitPolicy{PerSecond: 10, Burst: 4}
	t0 := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		nodes       int
		burst       int // tokens at first
		after300ms  int // tokens 300 ms after the burst was spent
		description string
	}{
		{0, 4, 3, "no cluster size: the whole limit"},
		{1, 4, 3, "one node: the whole limit"},
		{2, 2, 1, "two nodes: half of it"},
		{3, 1, 1, "three nodes: a burst of 4/3, one token"},
		{8, 1, 0, "eight nodes: the burst is at least one token"},
	} {
		t.Run(tc.description, func(t *testing.T) {
			l := newRateLimiter()
			if tc.nodes > 0 {
				n := tc.nodes
				l.nodes = func() int { return n }
			}
			k := rateKey{subject: "s", principal: "p"}
			require.Equal(t, tc.burst, takes(l, k, rp, t0))
			require.Equal(t, tc.after300ms, takes(l, k, rp, t0.Add(300*time.Millisecond)))
		})
	}

	t.Run("the cluster changes size", func(t *testing.T) {
		n := 1
		l := newRateLimiter()
		l.nodes = func() int { return n }
		k := rateKey{subject: "s", principal: "p"}
		require.True(t, l.take(k, rp, t0)) // 3 left of 4
		n = 2
		require.Equal(t, 2, takes(l, k, rp, t0), "what the bucket holds is cut to the new share")
		n = 1
		require.Equal(t, 0, takes(l, k, rp, t0), "a larger share does not refill the bucket at once")
		require.Equal(t, 1, takes(l, k, rp, t0.Add(100*time.Millisecond)), "it refills at the new rate")
		require.Equal(t, 5, takes(l, k, RateLimitPolicy{PerSecond: 10, Burst: 5}, t0.Add(100*time.Millisecond)),
			"a replaced policy starts full")
	})
}
