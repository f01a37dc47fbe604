package server

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTrustedProxyClient: the client of a request is its TCP peer unless
// the peer is a trusted proxy; then it is the rightmost address of the
// X-Forwarded-For headers that is not a trusted proxy's, and whatever a
// client wrote to the left of it is ignored.
func TestTrustedProxyClient(t *testing.T) {
	proxies, err := ParseTrustedProxies([]string{"127.0.0.0/8", " 10.0.0.0/8", "fd00::/8", "192.0.2.1"})
	require.NoError(t, err)
	for _, tc := range []struct {
		name, remote string
		xff          []string
		want         string // "" : the peer stands
	}{
		{"untrusted peer: the header is ignored", "203.0.113.9:5000", []string{"198.51.100.1"}, ""},
		{"trusted peer, no header", "127.0.0.1:5000", nil, ""},
		{"trusted peer, one hop", "127.0.0.1:5000", []string{"203.0.113.7"}, "203.0.113.7"},
		{"a client's own entries on the left are ignored", "127.0.0.1:5000", []string{"1.2.3.4, 203.0.113.7"}, "203.0.113.7"},
		{"trusted hops on the right are passed over", "127.0.0.1:5000", []string{"203.0.113.7, 10.1.2.3,192.0.2.1"}, "203.0.113.7"},
		{"header lines are read in order", "127.0.0.1:5000", []string{"1.2.3.4", "203.0.113.7, 10.0.0.1"}, "203.0.113.7"},
		{"an entry with a port", "127.0.0.1:5000", []string{"203.0.113.7:443"}, "203.0.113.7"},
		{"IPv6 with a port", "[fd00::1]:5000", []string{"[2001:db8::1]:443"}, "2001:db8::1"},
		{"IPv4-mapped", "[::ffff:127.0.0.1]:5000", []string{"::ffff:203.0.113.7"}, "203.0.113.7"},
		{"empty entries are skipped", "127.0.0.1:5000", []string{"203.0.113.7, ,"}, "203.0.113.7"},
		{"garbage at the right: trust nothing", "127.0.0.1:5000", []string{"203.0.113.7, not-an-ip"}, ""},
		{"only trusted hops", "127.0.0.1:5000", []string{"10.0.0.1, 127.0.0.2"}, ""},
		{"an exact address entry", "192.0.2.1:80", []string{"203.0.113.7"}, "203.0.113.7"},
		{"next to an exact entry", "192.0.2.2:80", []string{"203.0.113.7"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &http.Request{RemoteAddr: tc.remote, Header: http.Header{}}
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			a, ok := trustedProxies(proxies).client(r)
			if tc.want == "" {
				require.False(t, ok, "got %v", a)
				return
			}
			require.True(t, ok)
			require.Equal(t, netip.MustParseAddr(tc.want), a)
		})
	}
	a, ok := trustedProxies(nil).client(&http.Request{RemoteAddr: "127.0.0.1:1", Header: http.Header{"X-Forwarded-For": {"203.0.113.7"}}})
	require.False(t, ok, "no trusted proxies: the header is ignored (%v)", a)

	for _, bad := range []string{"", "10.0.0.0/33", "proxy.internal", "10.0.0.1:80"} {
		_, err := ParseTrustedProxies([]string{bad})
		require.Error(t, err, bad)
	}
}
