package server

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// followup28Listener wraps a connLimit around a listener fed by hand and
// returns dial, which hands it a connection from ip and returns what
// Accept returned: nil when the connection was refused (and closed).
func followup28Listener(t *testing.T, cl *connLimit) (dial func(ip string) net.Conn) {
	t.Helper()
	in := chanListener{conns: make(chan net.Conn)}
	l := cl.wrap(in)
	accepted := make(chan net.Conn, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() { close(in.conns) })
	return func(ip string) net.Conn {
		t.Helper()
		server, client := net.Pipe()
		t.Cleanup(func() { client.Close(); server.Close() })
		in.conns <- peerConn{Conn: server, remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}}
		done := make(chan struct{})
		go func() { _, _ = io.Copy(io.Discard, client); close(done) }()
		select {
		case c := <-accepted:
			return c
		case <-done:
			return nil // closed unanswered: refused over TLS
		case <-time.After(10 * time.Second):
			t.Fatal("neither accepted nor refused")
		}
		return nil
	}
}

// TestFollowup28ConnLimitCapsThe48: with MaxConnectionsPerIP set, the
// /64s of one IPv6 /48 together hold at most 16 times it: a /48 holder
// dialling from a fresh /64 for each connection no longer takes 65,536
// times the cap (every place MaxConnections allows). The next /48 has
// places of its own, IPv4 sources (and IPv6 addresses that carry one)
// are not counted together, a closed connection frees its /48's place,
// and without a per-IP cap there is no /48 cap either.
func TestFollowup28ConnLimitCapsThe48(t *testing.T) {
	const perIP = 1
	cl := newConnLimit(0, perIP, true, slog.New(slog.DiscardHandler), nil, nil)
	dial := followup28Listener(t, cl)
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
