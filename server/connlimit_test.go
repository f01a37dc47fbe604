package server_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/server"
)

// limitServer serves the demo broker on 127.0.0.1 with o, and returns its
// address.
func limitServer(t *testing.T, o *server.Options) (*server.Server, string) {
	t.Helper()
	ctx := context.Background()
	e, err := pigeon.New(ctx, &pigeon.Options{Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog()})
	require.NoError(t, err)
	s := server.New(e, o)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, s.Shutdown(sctx))
		require.ErrorIs(t, <-served, http.ErrServerClosed)
		require.NoError(t, e.Shutdown(sctx))
	})
	return s, l.Addr().String()
}

// heldConn is a keep-alive connection from local (nil: any) that got one
// answer, so the server has accepted it and holds it.
func heldConn(t *testing.T, addr string, local net.Addr) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: local, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	status, _ := get(t, c)
	require.Equal(t, http.StatusOK, status)
	return c
}

// get sends GET /health on c and reads the answer: its status and, for an
// error body, its code.
func get(t *testing.T, c net.Conn) (int, pigeon.Code) {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	_, err := c.Write([]byte("GET /health HTTP/1.1\r\nHost: pigeon\r\n\r\n"))
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var body struct {
		Error struct {
			Code pigeon.Code `json:"code"`
		} `json:"error"`
	}
	if resp.StatusCode != http.StatusOK {
		require.NoError(t, json.Unmarshal(b, &body), "body %s", b)
	}
	return resp.StatusCode, body.Error.Code
}

// tryHold opens a connection the server holds, if it has a place.
func tryHold(t *testing.T, addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	if status, _ := get(t, c); status != http.StatusOK {
		c.Close()
		return false
	}
	t.Cleanup(func() { c.Close() })
	return true
}

// fresh is get on a new connection from local (nil: any).
func fresh(t *testing.T, addr string, local net.Addr) (int, pigeon.Code) {
	t.Helper()
	d := net.Dialer{LocalAddr: local, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	return get(t, c)
}

// Beyond MaxConnections a connection is answered 429 RATE_LIMITED and
// closed; a closed connection, WebSockets included, frees its place.
func TestMaxConnections(t *testing.T) {
	_, addr := limitServer(t, &server.Options{MaxConnections: 3})
	a := heldConn(t, addr, nil)
	heldConn(t, addr, nil)
	ctx := context.Background()
	ws, _, err := websocket.Dial(ctx, "http://"+addr+"/v1/ws", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer checkout-token"}}})
	require.NoError(t, err)
	defer ws.CloseNow()

	status, code := fresh(t, addr, nil)
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Equal(t, pigeon.CodeRateLimited, code)
	for range 20 { // a flood of refusals changes nothing
		status, _ = fresh(t, addr, nil)
		require.Equal(t, http.StatusTooManyRequests, status)
	}

	status, _ = get(t, a)
	require.Equal(t, http.StatusOK, status, "a held connection goes on")
	require.NoError(t, a.Close())
	require.Eventually(t, func() bool { s, _ := fresh(t, addr, nil); return s == http.StatusOK }, 30*time.Second, 10*time.Millisecond,
		"a closed connection frees its place")

	// The place again, once the server saw the last fresh connection go.
	require.Eventually(t, func() bool { return tryHold(t, addr) }, 30*time.Second, 10*time.Millisecond)
	status, _ = fresh(t, addr, nil)
	require.Equal(t, http.StatusTooManyRequests, status)
	require.NoError(t, ws.Close(websocket.StatusNormalClosure, ""))
	require.Eventually(t, func() bool { s, _ := fresh(t, addr, nil); return s == http.StatusOK }, 30*time.Second, 10*time.Millisecond,
		"a closed WebSocket frees its place")
}

// MaxConnectionsPerIP caps one remote address and leaves the others be.
func TestMaxConnectionsPerIP(t *testing.T) {
	_, addr := limitServer(t, &server.Options{MaxConnectionsPerIP: 2})
	one := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}
	two := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}
	heldConn(t, addr, one)
	b := heldConn(t, addr, one)
	status, code := fresh(t, addr, one)
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Equal(t, pigeon.CodeRateLimited, code)
	status, _ = fresh(t, addr, two)
	require.Equal(t, http.StatusOK, status, "another address has places of its own")
	require.NoError(t, b.Close())
	require.Eventually(t, func() bool { s, _ := fresh(t, addr, one); return s == http.StatusOK }, 30*time.Second, 10*time.Millisecond)
}

// Over TLS a connection beyond the cap is closed before its handshake
// completes, and the server goes on.
func TestMaxConnectionsTLS(t *testing.T) {
	cert := httptest.NewTLSServer(http.NotFoundHandler())
	cfg := cert.TLS.Clone()
	pool := cert.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	cert.Close()
	_, addr := limitServer(t, &server.Options{MaxConnections: 1, TLS: cfg})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com"}}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("https://" + addr + "/health")
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body) // read to the end, so the connection stays open and held
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: "example.com"})
	if err == nil {
		c.Close()
	}
	require.Error(t, err, "the handshake of a connection beyond the cap fails")

	client.CloseIdleConnections()
	require.Eventually(t, func() bool {
		resp, err := client.Get("https://" + addr + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 10*time.Millisecond)
}

// The default caps the connections; a negative MaxConnections does not.
func TestMaxConnectionsDefault(t *testing.T) {
	require.Equal(t, 16384, server.DefaultMaxConnections)
	_, addr := limitServer(t, &server.Options{MaxConnections: -1})
	for range 5 {
		heldConn(t, addr, nil)
	}
	status, _ := fresh(t, addr, nil)
	require.Equal(t, http.StatusOK, status)
}
