package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestConnectionSiteOptions: Options.ConnectionSite sets how
// MaxConnectionsPerIP counts the /64s of one IPv6 site together, through
// the listener a Server wraps its own in: a smaller factor refuses sooner
// (factor 2: two /64s of the /48, then a third is refused), a /56 site
// leaves the next /56 of the /48 places of its own, off counts each /64
// alone, and the default is the /48 at 16 times.
func TestConnectionSiteOptions(t *testing.T) {
	e, err := pigeon.New(context.Background(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	in := func(i int) string { return fmt.Sprintf("2001:db8:5:%x::1", i) } // /64 i of 2001:db8:5::/48; i < 0x100: its first /56
	for _, tc := range []struct {
		name   string
		site   pigeon.SiteLimit
		places int  // /64s of the first /56 that each get a place (of 40 tried)
		next56 bool // the next /56 of the /48 still has a place then
	}{
		{"default", pigeon.SiteLimit{}, 16, false},
		{"factor 2", pigeon.SiteLimit{Factor: 2}, 2, false},
		{"/56 factor 2", pigeon.SiteLimit{Bits: 56, Factor: 2}, 2, true},
		{"off", pigeon.SiteLimit{Bits: -1}, 40, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// TLS set: a refused connection is closed unanswered, at once.
			s := New(e, &Options{MaxConnectionsPerIP: 1, ConnectionSite: tc.site, TLS: &tls.Config{}})
			dial := limitedListener(t, s.conns)
			got := 0
			for i := range 40 {
				if dial(in(i)) != nil {
					got++
				}
			}
			require.Equal(t, tc.places, got)
			require.Equal(t, tc.next56, dial(in(0x100)) != nil, "the next /56")
			require.NotNil(t, dial("2001:db8:6::1"), "another /48")
		})
	}
}

// TestConnectionSiteRefusedAtServe: Serve refuses to start, and
// closes its listener, with a ConnectionSite that is not valid.
func TestConnectionSiteRefusedAtServe(t *testing.T) {
	e, err := pigeon.New(context.Background(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	for _, site := range []pigeon.SiteLimit{{Bits: 64}, {Factor: -2}} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		err = New(e, &Options{MaxConnectionsPerIP: 1, ConnectionSite: site}).Serve(l)
		require.ErrorContains(t, err, "Options.ConnectionSite")
		_, err = l.Accept()
		require.ErrorIs(t, err, net.ErrClosed, "the listener is closed")
	}
}
