package server

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// An X-Forwarded-For entry may carry an IPv6 zone ("fe80::1%eth0"), text
// of the writer's choosing that names an interface of the host that wrote
// it, not part of the client's address. It was kept: RemoteAddr (and so
// pigeon.Credential.RemoteAddr, the logs and auth.failed records) held
// whatever zone the client wrote, one source under as many names as it
// liked. The zone is dropped: every zoned spelling of an address is that
// address.
func TestFollowup28ProxyDropsZone(t *testing.T) {
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
