package server_test

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/server"
)

// headerStatus sends a GET /healthz whose header holds a line of n bytes
// and returns the answer's status.
func headerStatus(t *testing.T, addr string, n int) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + strings.Repeat("a", n) + "\r\nConnection: close\r\n\r\n"))
	require.NoError(t, err)
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	_ = res.Body.Close()
	return res.StatusCode
}

// A request's header was bounded by net/http's default alone, 1 MiB: a
// client could hold about 1 MiB on each of the 16,384 connections the
// server allows, dripping its header for ReadHeaderTimeout, 16 GiB in all.
// The header is now bounded by Options.MaxHeaderBytes (default 64 KiB),
// beyond which the request is answered 431 before any handler runs; a
// negative value keeps net/http's bound.
func TestHeaderBytesBounded(t *testing.T) {
	_, addr := limitServer(t, nil)
	require.NotEqual(t, http.StatusRequestHeaderFieldsTooLarge, headerStatus(t, addr, 40<<10), "a 40 KiB header")
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, headerStatus(t, addr, 100<<10), "a 100 KiB header")
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, headerStatus(t, addr, 900<<10), "a 900 KiB header")

	_, addr = limitServer(t, &server.Options{MaxHeaderBytes: 8 << 10})
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, headerStatus(t, addr, 16<<10), "a 16 KiB header, beyond 8 KiB")

	_, addr = limitServer(t, &server.Options{MaxHeaderBytes: -1})
	require.NotEqual(t, http.StatusRequestHeaderFieldsTooLarge, headerStatus(t, addr, 100<<10), "net/http's bound")
}
