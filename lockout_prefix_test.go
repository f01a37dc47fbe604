package pigeon_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestLockoutCountsThe48: the /64s of one IPv6 /48 are also
// counted together, against 16 × AuthFailureLimit. A guesser holding a
// /48 that spends fewer than the limit in each of 32 of its /64s (limit
// 2, so 32 failures for the /48) locks out the whole /48: a /64 of it
// that never failed is locked (LockedOut and AuthenticateCredential
// agree, a valid token included), another /48 is not, and the /48
// authenticates again once the window has passed. IPv4 sources, and
// IPv6 addresses that carry an IPv4 one (64:ff9b::/96, 6to4, Teredo:
// their /48s hold many IPv4 clients), are not counted together.
func TestLockoutCountsThe48(t *testing.T) {
	const limit = 2
	f := newFixture(t, func(o *pigeon.Options) { o.AuthFailureLimit, o.AuthFailureWindow = limit, time.Minute })
	try := func(tok, remote string) error {
		_, err := f.e.AuthenticateCredential(ctx, pigeon.Credential{Bearer: tok, RemoteAddr: remote})
		return err
	}
	locked := func(remote string) bool {
		_, ok := f.e.LockedOut(pigeon.SourceOf(remote))
		return ok
	}
	// sub64 is an address in the i-th /64 of 2001:db8:7::/48.
	sub64 := func(i int) string { return fmt.Sprintf("[2001:db8:7:%x::1]:4000", i) }
	prefixLimit := 16 * limit
	for i := range prefixLimit {
		require.False(t, locked(sub64(i)), "below the /48's limit, at %d", i)
		requireCode(t, try("guess-"+strconv.Itoa(i), sub64(i)), pigeon.CodeUnauthenticated)
	}
	fresh := "[2001:db8:7:ffff::9]:4000"
	left, ok := f.e.LockedOut(pigeon.SourceOf(fresh))
	require.True(t, ok, "a /64 of the /48 that never failed is locked out with it")
	require.Equal(t, time.Minute, left)
	pe := requireCode(t, try("orders-token", fresh), pigeon.CodeRateLimited)
	require.Equal(t, time.Minute.Milliseconds(), pe.Details["retryAfterMs"])
	require.NoError(t, try("orders-token", "[2001:db8:8::1]:4000"), "another /48 is unaffected")
	require.NoError(t, try("orders-token", "[2001:db8:6:ffff::1]:4000"), "the /48 below is unaffected")

	f.clock.Advance(time.Minute)
	require.False(t, locked(fresh), "the window has passed")
	require.NoError(t, try("orders-token", fresh))

	// Sources that are IPv4 addresses, however written, each have only
	// their own count, whatever their /48 looks like.
	for _, tc := range []struct {
		name string
		gen  func(i int) string // the i-th of distinct IPv4 sources
	}{
		{"IPv4", func(i int) string { return fmt.Sprintf("198.51.100.%d:1", i) }},
		{"NAT64", func(i int) string { return fmt.Sprintf("[64:ff9b::c612:%x]:1", i) }},                             // 198.18.0.i
		{"6to4", func(i int) string { return fmt.Sprintf("[2002:c612:1%02x::1]:1", i) }},                            // 198.18.1.i
		{"Teredo", func(i int) string { return fmt.Sprintf("[2001:0:4136:e378:8000:63bf:39ed:fd%02x]:1", 0xff-i) }}, // 198.18.2.i
		{"IPv4-mapped", func(i int) string { return fmt.Sprintf("[::ffff:203.0.113.%d]:1", i) }},
	} {
		name, gen := tc.name, tc.gen
		t.Run(name, func(t *testing.T) {
			for i := 1; i <= prefixLimit+8; i++ {
				requireCode(t, try("guess", gen(i)), pigeon.CodeUnauthenticated)
			}
			require.True(t, pigeon.SourceOf(gen(200)).Prefix().Addr().Is4(), "an IPv4 source: %s", gen(200))
			require.False(t, locked(gen(200)), "no count shared with the others")
			require.NoError(t, try("orders-token", gen(200)))
		})
	}

	off := newFixture(t, func(o *pigeon.Options) { o.AuthFailureLimit = -1 })
	for i := range 64 {
		_, _ = off.e.AuthenticateCredential(ctx, pigeon.Credential{Bearer: "guess", RemoteAddr: sub64(i)})
	}
	_, ok = off.e.LockedOut(pigeon.SourceOf(fresh))
	require.False(t, ok, "no lockout at all: no /48 lockout either")
}
