package identity_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/identity"
)

// A Limiter counts an IPv6 source by its /64, whatever the interface ID,
// zone or port, so rotating addresses within a /64 does not dodge it; the
// next /64, and each IPv4 address (IPv4-mapped or not), count on their
// own; an address that is not IP counts whole, without its port. Only ::1
// is on loopback here, so the addresses are given to the limiter directly.
func TestLimiterKeysIPv6By64(t *testing.T) {
	l := identity.NewLimiter(&identity.LimiterOptions{MaxFailures: 2})
	l.Fail("[2001:db8:1:2::1]:443", true)
	require.True(t, l.Allow("[2001:db8:1:2::2]:443"))
	l.Fail("[2001:db8:1:2:ffff:ffff:ffff:ffff%eth0]:1", true)
	for _, remote := range []string{"[2001:db8:1:2::1]:443", "[2001:db8:1:2:abcd::]:9", "2001:db8:1:2::3"} {
		require.False(t, l.Allow(remote), remote)
	}
	require.True(t, l.Allow("[2001:db8:1:3::1]:443"), "the next /64 is another source")

	l.Fail("192.0.2.1:1", true)
	l.Fail("192.0.2.2:1", true)
	require.True(t, l.Allow("192.0.2.1:2"), "IPv4 sources are single addresses")
	l.Fail("[::ffff:192.0.2.1]:3", true)
	require.False(t, l.Allow("192.0.2.1:4"), "an IPv4-mapped address is its IPv4 address")

	l.Fail("@:1", true)
	l.Fail("@:2", true)
	require.False(t, l.Allow("@:3"))
	require.True(t, l.Allow(""), "in process is never limited")
}
