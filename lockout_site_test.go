package pigeon_test

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestLockoutSiteLimitOptions: Options.AuthFailureSite sets how
// the lockout counts the /64s of one IPv6 site together. A smaller factor
// locks the site sooner (factor 1, limit 2: two /64s with one refusal
// each lock a third); a /56 site leaves the next /56 of the same /48
// alone; Bits negative counts each /64 alone, so a campus or carrier NAT
// behind one /48 is not locked out by its neighbours' refusals. The
// default is unchanged (/48s at 16 times).
func TestLockoutSiteLimitOptions(t *testing.T) {
	const limit = 2
	// in is an address in /64 i of 2001:db8:7::/48 (i < 0x100: the
	// first /56 of it).
	in := func(i int) string { return fmt.Sprintf("[2001:db8:7:%x::1]:4000", i) }
	for _, tc := range []struct {
		name string
		site pigeon.SiteLimit
		// refusals: one each from this many /64s of the first /56 lock
		// a third /64 of it out; 0: none do (up to 64)
		refusals int
		next56   bool // the next /56 of the /48 is locked out with it
	}{
		{"default", pigeon.SiteLimit{}, 16 * limit, true},
		{"factor 1", pigeon.SiteLimit{Factor: 1}, limit, true},
		{"factor 3", pigeon.SiteLimit{Factor: 3}, 3 * limit, true},
		{"/56 factor 1", pigeon.SiteLimit{Bits: 56, Factor: 1}, limit, false},
		{"off", pigeon.SiteLimit{Bits: -1, Factor: 1}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(o *pigeon.Options) {
				o.AuthFailureLimit, o.AuthFailureWindow, o.AuthFailureSite = limit, time.Minute, tc.site
			})
			locked := func(remote string) bool {
				_, ok := f.e.LockedOut(pigeon.SourceOf(remote))
				return ok
			}
			fresh := in(0xff)
			n := tc.refusals
			if n == 0 {
				n = 64
			}
			for i := range n {
				require.False(t, locked(fresh), "after %d refusals", i)
				_, err := f.e.AuthenticateCredential(ctx, pigeon.Credential{Bearer: "guess", RemoteAddr: in(i)})
				requireCode(t, err, pigeon.CodeUnauthenticated)
			}
			require.Equal(t, tc.refusals > 0, locked(fresh), "a /64 that never failed, after %d refusals", n)
			if tc.refusals > 0 {
				_, err := f.e.AuthenticateCredential(ctx, pigeon.Credential{Bearer: "orders-token", RemoteAddr: fresh})
				requireCode(t, err, pigeon.CodeRateLimited)
			}
			require.Equal(t, tc.next56, locked("[2001:db8:7:100::1]:1"), "the next /56")
			require.False(t, locked("[2001:db8:8::1]:1"), "another /48")
		})
	}
}

// TestLockoutSiteLimitRefusedWhenInvalid: New refuses a site prefix
// length that is not 1 to 63 bits (a site is wider than a source's /64)
// and a negative factor, with INVALID_ARGUMENT naming the option.
func TestLockoutSiteLimitRefusedWhenInvalid(t *testing.T) {
	for _, site := range []pigeon.SiteLimit{{Bits: 64}, {Bits: 128}, {Factor: -1}, {Bits: 48, Factor: math.MinInt}} {
		_, err := pigeon.New(context.Background(), &pigeon.Options{AuthFailureSite: site})
		pe := requireCode(t, err, pigeon.CodeInvalidArgument)
		require.Contains(t, pe.Message, "Options.AuthFailureSite", site)
	}
}

// TestSiteLimitOf: SiteLimit.Of is the prefix of Bits an IPv6
// source lies in (48 by default, as Source.Site), none for IPv4, for
// addresses that carry one, when off or invalid; Limit is Factor times
// the per-source limit, saturating, 0 when off.
func TestSiteLimitOf(t *testing.T) {
	src := pigeon.SourceOf("[2001:db8:7:1234:5::1]:1")
	for _, tc := range []struct {
		site pigeon.SiteLimit
		want string // "": no site
	}{
		{pigeon.SiteLimit{}, "2001:db8:7::/48"},
		{pigeon.SiteLimit{Bits: 56}, "2001:db8:7:1200::/56"},
		{pigeon.SiteLimit{Bits: 32}, "2001:db8::/32"},
		{pigeon.SiteLimit{Bits: 63}, "2001:db8:7:1234::/63"},
		{pigeon.SiteLimit{Bits: -1}, ""},
		{pigeon.SiteLimit{Bits: 64}, ""},
	} {
		site, ok := tc.site.Of(src)
		require.Equal(t, tc.want != "", ok, tc.site)
		if ok {
			require.Equal(t, netip.MustParsePrefix(tc.want), site.Prefix(), tc.site)
		}
	}
	def, _ := src.Site()
	require.Equal(t, "2001:db8:7::/48", def.String())
	for _, v4 := range []string{"192.0.2.1:1", "[64:ff9b::c000:201]:1", "[2002:c000:201::1]:1"} {
		_, ok := pigeon.SiteLimit{Bits: 16}.Of(pigeon.SourceOf(v4))
		require.False(t, ok, v4)
	}
	require.Equal(t, 320, pigeon.SiteLimit{}.Limit(20))
	require.Equal(t, 20, pigeon.SiteLimit{Factor: 1}.Limit(20))
	require.Equal(t, 0, pigeon.SiteLimit{Bits: -1}.Limit(20))
	require.Equal(t, 0, pigeon.SiteLimit{}.Limit(0))
	require.Equal(t, math.MaxInt, pigeon.SiteLimit{Factor: 3}.Limit(math.MaxInt/2))
	require.NoError(t, pigeon.SiteLimit{Bits: -7, Factor: 1}.Check())
	require.Error(t, pigeon.SiteLimit{Bits: 64}.Check())
	require.Error(t, pigeon.SiteLimit{Factor: -1}.Check())
}
