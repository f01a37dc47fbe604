package identity_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/identity"
)

// A Limiter counted each IPv6 /64 on its own, so the holder of a /48 (or
// a /56) had a fresh count in each of its 65,536 (256) /64s: 20 failed
// handshakes a minute became 1.3 million. The /64s of a /48 now also
// count together, against LimiterOptions.MaxPrefixFailures (default 16 ×
// MaxFailures): once the /48 reaches it, every address of the /48 is
// refused for the rest of the window, the next /48 and IPv4 sources not.
// Below it the /48's honest clients are untouched: 15 of its /64s at their
// own limit leave the others trying.
func TestLimiterCountsThe48(t *testing.T) {
	var off atomic.Int64
	now := func() time.Time { return time.Unix(1_700_000_000, 0).Add(time.Duration(off.Load())) }
	addr := func(n int) string { return fmt.Sprintf("[2001:db8:1:%x::1]:443", n) } // /64 n of 2001:db8:1::/48

	t.Run("default", func(t *testing.T) {
		l := identity.NewLimiter(&identity.LimiterOptions{MaxFailures: 2, Now: now})
		// 15 /64s at their own limit: each is refused, the /48 is not.
		for n := range 15 {
			l.Fail(addr(n), true)
			l.Fail(addr(n), true)
			require.False(t, l.Allow(addr(n)), "/64 %d is at its limit", n)
		}
		require.True(t, l.Allow(addr(100)), "30 failures of 32: another /64 of the /48 tries")
		l.Fail(addr(15), true)
		require.True(t, l.Allow(addr(100)), "31 of 32")
		l.Fail(addr(16), true)
		for _, remote := range []string{addr(100), addr(0xffff), "[2001:db8:1:abcd:1:2:3:4%eth0]:1", "2001:db8:1::"} {
			require.False(t, l.Allow(remote), "the /48 reached 32: %s", remote)
		}
		require.True(t, l.Allow("[2001:db8:2::1]:443"), "the next /48")
		require.True(t, l.Allow("[2001:db8:0:ffff::1]:443"), "the /48 before")
		require.True(t, l.Allow("192.0.2.1:443"))
		require.True(t, l.Allow("[2002:c000:201::1]:443"), "6to4 is its IPv4 address's source, not a /48")
		off.Add(int64(identity.DefaultFailureWindow))
		require.True(t, l.Allow(addr(100)), "the window has passed")
	})

	t.Run("rotating /64s", func(t *testing.T) {
		// One failure from each of many /64s: no /64 is ever at its limit.
		l := identity.NewLimiter(&identity.LimiterOptions{MaxFailures: 20, MaxPrefixFailures: 50, Now: now})
		for n := range 50 {
			require.True(t, l.Allow(addr(n)), "/64 %d, after %d failures of the /48", n, n)
			l.Fail(addr(n), true)
		}
		require.False(t, l.Allow(addr(50)), "the 51st /64")
		require.Equal(t, int64(50), l.Stats().HandshakeFailures)
		require.Equal(t, int64(1), l.Stats().Limited)
	})

	t.Run("off", func(t *testing.T) {
		l := identity.NewLimiter(&identity.LimiterOptions{MaxFailures: 2, MaxPrefixFailures: -1, Now: now})
		for n := range 1000 {
			l.Fail(addr(n), true)
		}
		require.True(t, l.Allow(addr(1000)))
	})

	t.Run("IPv4 has no aggregate", func(t *testing.T) {
		l := identity.NewLimiter(&identity.LimiterOptions{MaxFailures: 2, MaxPrefixFailures: 3, Now: now})
		for n := range 10 {
			l.Fail(fmt.Sprintf("192.0.2.%d:1", n), true)
		}
		require.True(t, l.Allow("192.0.2.200:1"))
	})
}
