package pigeon_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestSourceOf: an address's source is IPv4 (and IPv4-mapped IPv6) per
// address, IPv6 per /64 whatever the zone, host:port and bare forms alike,
// and none for what is not an IP address.
func TestSourceOf(t *testing.T) {
	for _, c := range []struct{ remote, want string }{
		{"192.0.2.1", "192.0.2.1"},
		{"192.0.2.1:5000", "192.0.2.1"},
		{"192.0.2.2:5000", "192.0.2.2"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{"[::ffff:192.0.2.1]:443", "192.0.2.1"},
		{"2001:db8:1:2::1", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:3::1]:443", "2001:db8:1:3::/64"},
		{"::1", "::/64"},
		{"[::1]:8787", "::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"[fe80::1234%eth1]:80", "fe80::/64"},
		{"", ""},
		{"@", ""},
		{"pipe", ""},
		{"localhost:80", ""},
		{"192.0.2.1:", ""},
		{"[2001:db8::1]", ""},
		{"2001:db8::1:80:", ""},
		{"300.1.1.1:80", ""},
	} {
		s := pigeon.SourceOf(c.remote)
		require.Equal(t, c.want, s.String(), "%q", c.remote)
		require.Equal(t, c.want != "", s.IsValid(), "%q", c.remote)
	}
	require.Equal(t, pigeon.SourceOf("[2001:db8:1:2::1]:1"), pigeon.SourceOf("2001:db8:1:2:ffff:ffff:ffff:ffff"), "one key, for maps")
	require.NotEqual(t, pigeon.SourceOf("192.0.2.1"), pigeon.SourceOf("192.0.2.2"))
	require.Equal(t, netip.MustParsePrefix("2001:db8:1:2::/64"), pigeon.SourceOf("2001:db8:1:2::9").Prefix())
	require.Equal(t, netip.MustParsePrefix("192.0.2.1/32"), pigeon.SourceOf("192.0.2.1").Prefix())
	require.Equal(t, pigeon.SourceOf("[::ffff:192.0.2.7]:1"), pigeon.SourceOfAddr(netip.MustParseAddr("::ffff:192.0.2.7")))
	require.False(t, pigeon.SourceOfAddr(netip.Addr{}).IsValid())
}

// The source a per-source limit counts, and an auth.failed record names:
// an IPv6 address's /64, an IPv4 address itself.
func ExampleSourceOf() {
	fmt.Println(pigeon.SourceOf("[2001:db8:1:2::7]:443"))
	fmt.Println(pigeon.SourceOf("[2001:db8:1:2:ffff::1]:443") == pigeon.SourceOf("2001:db8:1:2::7"))
	fmt.Println(pigeon.SourceOf("192.0.2.1:5000"))
	// Output:
	// 2001:db8:1:2::/64
	// true
	// 192.0.2.1
}

// TestSourceSite: an IPv6 source lies in its /48; an IPv4 source, one an
// IPv6 address carrying an IPv4 address makes, and the zero Source have
// none.
func TestSourceSite(t *testing.T) {
	for _, tc := range []struct{ remote, site string }{
		{"[2001:db8:1:2::1]:443", "2001:db8:1::/48"},
		{"2001:db8:1:ffff:1:2:3:4", "2001:db8:1::/48"},
		{"192.0.2.1:443", ""},
		{"[::ffff:192.0.2.1]:443", ""},
		{"[2002:c000:201::1]:443", ""}, // 6to4: 192.0.2.1
		{"", ""},
	} {
		site, ok := pigeon.SourceOf(tc.remote).Site()
		require.Equal(t, tc.site != "", ok, tc.remote)
		if ok {
			require.Equal(t, tc.site, site.String(), tc.remote)
		}
	}
}

// TestSourceOfIPv6CarryingIPv4: an IPv6 address that carries the IPv4
// address its replies go to is that IPv4 source. By /64, every IPv4
// client of a broker behind a translator (64:ff9b::/96) shared one count,
// so one guesser locked them all out (and the per-source connection cap
// held them all); and one IPv4 host had 65,536 /64s under 6to4
// (2002:V4ADDR::/48), or one per Teredo flags value, each a fresh count.
func TestSourceOfIPv6CarryingIPv4(t *testing.T) {
	for _, c := range []struct{ remote, want string }{
		{"64:ff9b::192.0.2.1", "192.0.2.1"},
		{"[64:ff9b::c633:6407]:443", "198.51.100.7"},
		{"2002:c000:201::1", "192.0.2.1"},
		{"[2002:c000:201:ffff:1:2:3:4]:443", "192.0.2.1"},
		// RFC 4380's example: client 192.0.2.45 behind server 65.54.227.120.
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "192.0.2.45"},
		{"[2001:0:4136:e378:4000:63bf:3fff:fdd2]:80", "192.0.2.45"},
		// Not those prefixes: by /64 as before.
		{"64:ff9b:1::c000:201", "64:ff9b:1::/64"},
		{"2001:db8:1:2::1", "2001:db8:1:2::/64"},
		{"2003:c000:201::1", "2003:c000:201::/64"},
	} {
		s := pigeon.SourceOf(c.remote)
		require.Equal(t, c.want, s.String(), "%q", c.remote)
		require.True(t, s.IsValid())
	}
	require.NotEqual(t, pigeon.SourceOf("64:ff9b::192.0.2.1"), pigeon.SourceOf("64:ff9b::192.0.2.2"), "two IPv4 clients through one translator")
	require.Equal(t, pigeon.SourceOf("192.0.2.1:5000"), pigeon.SourceOf("[2002:c000:201:1::1]:5000"), "a 6to4 host counts as its IPv4 address")
	require.Equal(t, pigeon.SourceOf("2002:c000:201:1::1"), pigeon.SourceOf("2002:c000:201:2::1"), "one count for the whole /48")
}
