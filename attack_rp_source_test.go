package pigeon_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

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
