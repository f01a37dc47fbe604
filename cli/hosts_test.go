package cli

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The quickstart's broker listens on 127.0.0.1 with the demo's public
// tokens (admin-token among them). A DNS rebinding page (a page of the
// attacker's name whose address is then made 127.0.0.1) is of the
// broker's origin in the browser's eyes and could act as admin; on a
// loopback address `serve` now answers only to localhost names and IP
// addresses unless --allowed-hosts says otherwise.
func TestServeOnLoopbackRefusesOtherHostNames(t *testing.T) {
	get := func(t *testing.T, r *running, host string) int {
		req, err := http.NewRequest(http.MethodGet, r.url+"/v1/accounts", nil)
		require.NoError(t, err)
		req.Host = host
		req.Header.Set("Authorization", "Bearer admin-token")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	r := startServe(t, serveConfig{})
	port := r.url[strings.LastIndex(r.url, ":"):]
	require.Equal(t, http.StatusForbidden, get(t, r, "rebind.evil.example"+port))
	require.Equal(t, http.StatusOK, get(t, r, "localhost"+port))
	require.Equal(t, http.StatusOK, get(t, r, "127.0.0.1"+port))

	// Named, a host is answered to (and localhost no longer by default).
	r = startServe(t, serveConfig{allowedHosts: []string{"broker.example.com"}})
	require.Equal(t, http.StatusOK, get(t, r, "broker.example.com"))
	require.Equal(t, http.StatusForbidden, get(t, r, "localhost"))
}

func TestAllowedHostsFor(t *testing.T) {
	require.Equal(t, []string{"localhost", "*.localhost"}, allowedHostsFor(serveConfig{addr: "127.0.0.1:8787"}))
	require.Equal(t, []string{"localhost", "*.localhost"}, allowedHostsFor(serveConfig{addr: "localhost:8787"}))
	require.Empty(t, allowedHostsFor(serveConfig{addr: ":8787"}), "every interface: any name unless told")
	require.Empty(t, allowedHostsFor(serveConfig{addr: "0.0.0.0:8787"}))
	require.Equal(t, []string{"a.example"}, allowedHostsFor(serveConfig{addr: "127.0.0.1:8787", allowedHosts: []string{"a.example"}}))
	for _, bad := range []string{"", " a", "a:80", "http://a", "a[", "a/b"} {
		require.Error(t, checkHost(bad), bad)
	}
	for _, good := range []string{"localhost", "*.localhost", "broker.example.com", "*.example.com", "broker-?.example.com"} {
		require.NoError(t, checkHost(good), good)
	}
}
