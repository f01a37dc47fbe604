package server

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
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

// FuzzForwardedClient holds the X-Forwarded-For reading to its rule on any
// header and any trusted list: a client is found only behind a trusted
// peer; it is an address one of the hops names, not a trusted one; and
// every hop to its right names a trusted proxy. Nothing a client writes
// to the left of the first untrusted hop can be taken.
func FuzzForwardedClient(f *testing.F) {
	f.Add("10.0.0.0/8,fd00::/8", "10.1.2.3:443", "203.0.113.7, 10.0.0.2")
	f.Add("10.0.0.1", "10.0.0.1:80", "198.51.100.1, 203.0.113.7:5000, 10.0.0.1")
	f.Add("192.168.0.0/16", "192.168.1.1:1", "[2001:db8::1]:443,::ffff:192.168.3.4")
	f.Add("10.0.0.0/8", "198.51.100.9:1", "10.0.0.1")
	f.Add(" 10.0.0.0/8 ", "10.0.0.1:1", ",,")
	f.Fuzz(func(t *testing.T, trusted, peer, xff string) {
		prefixes, err := ParseTrustedProxies(strings.Split(trusted, ","))
		if err != nil {
			return
		}
		for _, p := range prefixes {
			require.Equal(t, p, p.Masked(), "a prefix is kept masked")
		}
		tp := trustedProxies(prefixes)
		r := &http.Request{RemoteAddr: peer, Header: http.Header{"X-Forwarded-For": []string{xff}}}
		a, ok := tp.client(r)
		if !ok {
			return
		}
		p, err := netip.ParseAddrPort(peer)
		require.NoError(t, err, "a client only behind a peer with an address")
		require.True(t, tp.trusts(p.Addr()), "a client only behind a trusted peer")
		require.False(t, tp.trusts(a), "the client is not a trusted proxy")
		hops := strings.Split(xff, ",")
		at := -1
		for i := len(hops) - 1; i >= 0; i-- {
			h := strings.TrimSpace(hops[i])
			if h == "" {
				continue
			}
			b, err := netip.ParseAddr(h)
			if err != nil {
				ap, perr := netip.ParseAddrPort(h)
				require.NoError(t, perr, "every hop right of the client is an address")
				b = ap.Addr()
			}
			if b.Unmap() == a {
				at = i
				break
			}
			require.True(t, tp.trusts(b.Unmap()), "every hop right of the client is a trusted proxy: %q", h)
		}
		require.GreaterOrEqual(t, at, 0, "the client is a hop of the header")
	})
}

// An X-Forwarded-For entry may carry an IPv6 zone ("fe80::1%eth0"), text
// of the writer's choosing that names an interface of the host that wrote
// it, not part of the client's address. It was kept: RemoteAddr (and so
// pigeon.Credential.RemoteAddr, the logs and auth.failed records) held
// whatever zone the client wrote, one source under as many names as it
// liked. The zone is dropped: every zoned spelling of an address is that
// address.
func TestTrustedProxyDropsZone(t *testing.T) {
	proxies, err := ParseTrustedProxies([]string{"127.0.0.0/8"})
	require.NoError(t, err)
	s := &Server{proxies: trustedProxies(proxies)}
	for _, xff := range []string{
		"fe80::1%eth0",
		"fe80::1%eth1",
		"[fe80::1%25x]:443",
		"fe80::1%a-zone-of-the-client's-choosing",
		"fe80::1",
	} {
		r := &http.Request{RemoteAddr: "127.0.0.1:5000", Header: http.Header{"X-Forwarded-For": {xff}}}
		a, ok := s.proxies.client(r)
		require.True(t, ok, xff)
		require.Equal(t, netip.MustParseAddr("fe80::1"), a, xff)
		require.Empty(t, a.Zone(), xff)
		r2 := s.fromClient(r)
		require.Equal(t, "[fe80::1]:0", r2.RemoteAddr, xff)
		require.Equal(t, pigeon.SourceOf("fe80::1"), pigeon.SourceOf(r2.RemoteAddr), xff)
	}
}
