package netsource

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// An address's source: IPv4 (and IPv4-mapped IPv6) per address, IPv6 per
// /64 whatever the zone, host:port and bare forms alike, nothing for what
// is not an IP address.
func TestOf(t *testing.T) {
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
		k := Of(c.remote)
		require.Equal(t, c.want, k.String(), "%q", c.remote)
		require.Equal(t, c.want != "", k.IsValid(), "%q", c.remote)
	}
	require.Equal(t, Of("[2001:db8:1:2::1]:1"), Of("2001:db8:1:2:ffff:ffff:ffff:ffff"), "one key, for maps")
	require.NotEqual(t, Of("192.0.2.1"), Of("192.0.2.2"))
	require.Equal(t, netip.MustParsePrefix("2001:db8:1:2::/64"), Of("2001:db8:1:2::9").Prefix())
	require.Equal(t, netip.MustParsePrefix("192.0.2.1/32"), Of("192.0.2.1").Prefix())
}

// The source of a connection's net.Addr reads as that of its string.
func TestOfNet(t *testing.T) {
	for _, c := range []struct {
		a    net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 1}, "192.0.2.7"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 1}, "192.0.2.7"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8::5"), Port: 1, Zone: "eth0"}, "2001:db8::/64"},
		{&net.UDPAddr{IP: net.ParseIP("2001:db8:0:1::5"), Port: 1}, "2001:db8:0:1::/64"},
		{&net.UnixAddr{Name: "/tmp/s", Net: "unix"}, ""},
		{nil, ""},
	} {
		require.Equal(t, c.want, OfNet(c.a).String(), "%v", c.a)
	}
}
