package server

import (
	"fmt"
	"log/slog"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConnLimitCapsThe48: with MaxConnectionsPerIP set, the
// /64s of one IPv6 /48 together hold at most 16 times it: a /48 holder
// dialling from a fresh /64 for each connection no longer takes 65,536
// times the cap (every place MaxConnections allows). The next /48 has
// places of its own, IPv4 sources (and IPv6 addresses that carry one)
// are not counted together, a closed connection frees its /48's place,
// and without a per-IP cap there is no /48 cap either.
func TestConnLimitCapsThe48(t *testing.T) {
	const perIP = 1
	cl := newConnLimit(0, perIP, true, slog.New(slog.DiscardHandler), nil, nil)
	dial := limitedListener(t, cl)
	in48 := func(i int) string { return fmt.Sprintf("2001:db8:5:%x::1", i) }
	var first net.Conn
	for i := range 16 * perIP {
		c := dial(in48(i))
		require.NotNil(t, c, "a place for the %d-th /64 of the /48", i)
		if first == nil {
			first = c
		}
	}
	require.Nil(t, dial(in48(0xffff)), "the /48 holds 16 × the per-IP cap, from a fresh /64")
	require.NotNil(t, dial("2001:db8:6::1"), "the next /48 has places of its own")
	for i := range 20 * perIP {
		require.NotNil(t, dial(fmt.Sprintf("198.51.100.%d", i)), "IPv4 sources are not counted together")
		require.NotNil(t, dial(fmt.Sprintf("64:ff9b::c612:%x", i)), "nor are IPv4 clients of a NAT64 (198.18.0.%d)", i)
		require.NotNil(t, dial(fmt.Sprintf("2002:c612:1%02x::1", i)), "nor 6to4 (198.18.1.%d)", i)
	}
	require.NoError(t, first.Close())
	require.NotNil(t, dial(in48(0xffff)), "a closed connection frees the /48's place")
	require.Nil(t, dial(in48(0xfffe)))

	off := newConnLimit(0, 0, true, slog.New(slog.DiscardHandler), nil, nil)
	require.Equal(t, 0, off.perPrefix, "no per-IP cap: no /48 cap")
	require.Equal(t, 16, newConnLimit(0, 1, true, slog.New(slog.DiscardHandler), nil, nil).perPrefix)
}
