package identity_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/identity"
)

// TestLimiterSiteOptions: LimiterOptions.Site sets how the
// handshake limiter counts the /64s of one IPv6 site together: a smaller
// factor refuses sooner (factor 1, limit 2: a site is refused after two
// failures from two /64s), a /56 site leaves the next /56 of the /48
// alone, off counts each /64 alone whatever MaxPrefixFailures says, and
// an invalid Site makes NewLimiter panic naming it (serve checks it
// first).
func TestLimiterSiteOptions(t *testing.T) {
	now := func() time.Time { return time.Unix(1_700_000_000, 0) }
	in := func(i int) string { return fmt.Sprintf("[2001:db8:1:%x::1]:443", i) } // /64 i of 2001:db8:1::/48
	for _, tc := range []struct {
		name   string
		opts   identity.LimiterOptions
		fails  int  // failures, one from each of this many /64s of the first /56, that refuse a fresh /64 of it (0: none of 64)
		next56 bool // the next /56 of the /48 is refused then
	}{
		{"default", identity.LimiterOptions{}, 32, true},
		{"factor 1", identity.LimiterOptions{Site: pigeon.SiteLimit{Factor: 1}}, 2, true},
		{"/56 factor 1", identity.LimiterOptions{Site: pigeon.SiteLimit{Bits: 56, Factor: 1}}, 2, false},
		{"off", identity.LimiterOptions{Site: pigeon.SiteLimit{Bits: -1}, MaxPrefixFailures: 3}, 0, false},
		{"MaxPrefixFailures wins over the factor", identity.LimiterOptions{Site: pigeon.SiteLimit{Factor: 1}, MaxPrefixFailures: 5}, 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.MaxFailures, o.Now = 2, now
			l := identity.NewLimiter(&o)
			n := tc.fails
			if n == 0 {
				n = 64
			}
			for i := range n {
				require.True(t, l.Allow(in(0xff)), "after %d failures", i)
				l.Fail(in(i), true)
			}
			require.Equal(t, tc.fails == 0, l.Allow(in(0xff)), "a fresh /64 of the /56 after %d failures", n)
			require.Equal(t, !tc.next56, l.Allow(in(0x100)), "the next /56")
			require.True(t, l.Allow("[2001:db8:2::1]:443"), "another /48")
		})
	}
	for _, site := range []pigeon.SiteLimit{{Bits: 64}, {Factor: -1}} {
		require.PanicsWithValue(t, "identity: LimiterOptions.Site: "+site.Check().Error(), func() {
			identity.NewLimiter(&identity.LimiterOptions{Site: site})
		})
	}
}
