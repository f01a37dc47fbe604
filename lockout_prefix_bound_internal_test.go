package pigeon

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLockoutPrefixTableIsBounded: the /48s counted together
// are remembered in a table of at most maxAuthSources, apart from the
// sources' (whose bound and contents they do not change), forgetting the
// /48 whose window began first; a /48 locked out recently stays locked,
// for every /64 of it.
func TestLockoutPrefixTableIsBounded(t *testing.T) {
	g := newAuthGuard(1, time.Minute) // a /48 locks after 16 failures
	at := time.Unix(1000, 0)
	// in48 is an address in the j-th /64 of the i-th /48 of 2001:db8::/32
	// (2001:db8:i::/48 for i < 65536, then further /32s).
	in48 := func(i, j int) Source {
		return SourceOfAddr(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, byte(0xb8 + i>>16), 4: byte(i >> 8), 5: byte(i), 6: byte(j >> 8), 7: byte(j), 15: 1}))
	}
	first := in48(0, 0)
	g.failed(first, at)
	require.Equal(t, 1, g.prefixSize())
	_, ok := g.prefixes[Source{p: netip.MustParsePrefix("2001:db8::/48")}]
	require.True(t, ok, "the /48 of 2001:db8::/64 is remembered")
	for i := 1; i <= maxAuthSources+100; i++ {
		g.failed(in48(i, 0), at.Add(time.Millisecond))
		require.LessOrEqual(t, g.prefixSize(), maxAuthSources)
		require.LessOrEqual(t, g.size(), maxAuthSources)
	}
	_, ok = g.prefixes[Source{p: netip.MustParsePrefix("2001:db8::/48")}]
	require.False(t, ok, "the oldest /48 was forgotten")
	_, ok = g.sources[first]
	require.False(t, ok, "and the oldest source, by the sources' own bound")

	locked := maxAuthSources + 500
	for j := range authPrefixFailuresPerSource {
		g.failed(in48(locked, j), at.Add(time.Second))
	}
	require.Equal(t, maxAuthSources, g.prefixSize())
	left, ok := g.locked(in48(locked, 0xffff), at.Add(2*time.Second))
	require.True(t, ok, "a /64 that never failed, in the locked /48")
	require.Equal(t, 59*time.Second, left)
	_, ok = g.locked(in48(locked+1, 0), at.Add(2*time.Second))
	require.False(t, ok, "the next /48")
}
