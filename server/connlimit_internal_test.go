package server

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// peerConn is one end of a pipe that says it comes from remote.
type peerConn struct {
	net.Conn
	remote net.Addr
}

func (c peerConn) RemoteAddr() net.Addr { return c.remote }

// chanListener accepts the connections sent on its channel.
type chanListener struct{ conns chan net.Conn }

func (l chanListener) Accept() (net.Conn, error) {
	c, ok := <-l.conns
	if !ok {
		return nil, net.ErrClosed
	}
	return c, nil
}
func (chanListener) Close() error   { return nil }
func (chanListener) Addr() net.Addr { return &net.TCPAddr{} }

// limitedListener wraps a connLimit around a listener fed by hand and
// returns dial, which hands it a connection from ip and returns what
// Accept returned: nil when the connection was refused (and closed).
func limitedListener(t *testing.T, cl *connLimit) (dial func(ip string) net.Conn) {
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

// TestMaxConnectionsPerIPKeysIPv6By64: the per-IP cap holds a whole IPv6
// /64 (a host given one can dial from any of its addresses) and leaves
// the next /64 and IPv4 addresses places of their own. Only ::1 is on
// loopback here, so the listener is fed connections that say where they
// come from; they go through the listener the server wraps its own in.
func TestMaxConnectionsPerIPKeysIPv6By64(t *testing.T) {
	cl := newConnLimit(0, 2, true, slog.New(slog.DiscardHandler), nil, nil)
	dial := limitedListener(t, cl)
	a := dial("2001:db8:1:2::1")
	require.NotNil(t, a)
	require.NotNil(t, dial("2001:db8:1:2:ffff:ffff:ffff:ffff"), "a second place for the /64")
	require.Nil(t, dial("2001:db8:1:2::3"), "the /64 holds its cap, from a third address")
	require.NotNil(t, dial("192.0.2.1"), "an IPv4 address has places of its own")
	require.NotNil(t, dial("2001:db8:1:3::1"), "the next /64 has places of its own")
	require.NotNil(t, dial("192.0.2.2"))
	require.NotNil(t, dial("192.0.2.2"))
	require.Nil(t, dial("::ffff:192.0.2.2"), "an IPv4-mapped address is its IPv4 address")
	require.NoError(t, a.Close())
	require.NotNil(t, dial("2001:db8:1:2::4"), "a closed connection frees the /64's place")
}

// syncBuffer is a bytes.Buffer safe for concurrent use, for a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestLockedOutAtAcceptKeysBySourceAndWarnsOnce: the accept check asks
// about the peer's source (any address of a locked IPv6 /64 is refused),
// never about a trusted proxy's, counts every refusal and logs one
// warning for a run of them; the connections it lets in take their
// places as usual.
func TestLockedOutAtAcceptKeysBySourceAndWarnsOnce(t *testing.T) {
	locked := pigeon.SourceOf("2001:db8:1:2::1")
	var asked atomic.Int64
	lockedOut := func(src pigeon.Source) (time.Duration, bool) {
		asked.Add(1)
		return 30 * time.Second, src == locked
	}
	var logs syncBuffer
	cl := newConnLimit(-1, 0, true, slog.New(slog.NewTextHandler(&logs, nil)),
		trustedProxies{netip.MustParsePrefix("2001:db8:1:2::ff/128")}, lockedOut)
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
	defer close(in.conns)
	dial := func(ip string) net.Conn {
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
			return nil
		case <-time.After(10 * time.Second):
			t.Fatal("neither accepted nor refused")
		}
		return nil
	}
	for _, ip := range []string{"2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff::9"} {
		require.Nil(t, dial(ip), "%s is of the locked /64", ip)
	}
	require.NotNil(t, dial("2001:db8:1:3::1"), "the next /64")
	require.NotNil(t, dial("2001:db8:1:2::ff"), "a trusted proxy in the locked /64")
	require.EqualValues(t, 4, asked.Load(), "the trusted proxy was not asked about")
	require.EqualValues(t, 3, cl.locked.Load())
	require.Zero(t, cl.refused.Load())
	require.Equal(t, 1, strings.Count(logs.String(), "source locked out"), "%s", logs.String())
	require.Contains(t, logs.String(), "source=2001:db8:1:2::/64")
}
