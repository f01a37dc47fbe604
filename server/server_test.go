package server_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/server"
)

// Serve runs the API with timeouts; Shutdown stops it, closes WebSockets
// with 1001 and is idempotent.
//
// The header timeout is short, so the listener hands the server each
// connection only once its first bytes have come: the well-behaved
// requests, written in one piece, are then read whole however late the
// client was scheduled after its dial, and only the slow client is cut off.
func TestServeAndShutdown(t *testing.T) {
	ctx := context.Background()
	e, err := pigeon.New(ctx, &pigeon.Options{Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog()})
	require.NoError(t, err)
	defer e.Shutdown(ctx)
	s := server.New(e, &server.Options{ReadHeaderTimeout: 100 * time.Millisecond})
	l := arrivedListener(t)
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	base := "http://" + l.Addr().String()

	resp, err := http.Get(base + "/health")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// A client that never finishes its headers is cut off.
	slow, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer slow.Close()
	_, err = slow.Write([]byte("GET /health HTTP/1.1\r\nHost: x\r\n"))
	require.NoError(t, err)
	require.NoError(t, slow.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = bufio.NewReader(slow).ReadString('\n')
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the server closed the connection before our deadline")

	c, _, err := websocket.Dial(ctx, base+"/v1/ws", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer checkout-token"}}})
	require.NoError(t, err)
	defer c.CloseNow()
	status := make(chan websocket.StatusCode, 1)
	go func() {
		for {
			if _, _, err := c.Read(ctx); err != nil {
				status <- websocket.CloseStatus(err)
				return
			}
		}
	}()

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, s.Shutdown(sctx))
	require.NoError(t, s.Shutdown(sctx))
	require.ErrorIs(t, <-served, http.ErrServerClosed)
	require.Equal(t, websocket.StatusGoingAway, <-status)
	require.ErrorIs(t, s.Serve(l), http.ErrServerClosed, "no serving after Shutdown")
}

// arrivedListener listens on a loopback port and hands out a connection
// once the client's first bytes have arrived (or 30 s have passed), so
// that the server's read timeouts count from the request's arrival rather
// than from a dial that a busy machine may leave unwritten for a while.
func arrivedListener(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return arrived{l}
}

type arrived struct{ net.Listener }

func (l arrived) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	r := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, _ = r.Peek(1) // a failure shows in the server's own read
	_ = c.SetReadDeadline(time.Time{})
	return &peeked{Conn: c, r: r}, nil
}

// peeked is a connection whose first bytes were read ahead into r.
type peeked struct {
	net.Conn
	r *bufio.Reader
}

func (c *peeked) Read(b []byte) (int, error) { return c.r.Read(b) }
