package cli

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// serve --trusted-proxy (trusted_proxies in the config file) names the
// proxies whose X-Forwarded-For the server believes: parsed from either,
// refused when not an address or a prefix, and in force on a real
// listener, where the client behind the proxy is the source of a refused
// credential's audit record.
func TestServeTrustedProxies(t *testing.T) {
	cfg, _, ok := parseServe([]string{"--trusted-proxy", "10.0.0.0/8,192.0.2.1", "--trusted-proxy", "fd00::/8"}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, []string{"10.0.0.0/8", "192.0.2.1", "fd00::/8"}, cfg.trustedProxies)
	cfg, _, ok = parseServe([]string{"--config", writeConfig(t, "trusted_proxies: [10.0.0.0/8]\n")}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, []string{"10.0.0.0/8"}, cfg.trustedProxies)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--trusted-proxy", "proxy.internal"}, "--trusted-proxy: "},
		{[]string{"--trusted-proxy", "10.0.0.0/40"}, "--trusted-proxy: "},
		{[]string{"--config", writeConfig(t, "trusted_proxies: [10.0.0.0/8, nope]\n")}, ":1: "},
	} {
		var stderr strings.Builder
		_, code, ok := parseServe(tc.args, &stderr, nil)
		require.False(t, ok, tc.args)
		require.Equal(t, 2, code)
		require.Contains(t, stderr.String(), tc.want)
		require.Contains(t, stderr.String(), "neither an address nor a CIDR prefix")
	}

	r := startServe(t, serveConfig{trustedProxies: []string{"127.0.0.0/8"}})
	req, err := http.NewRequest(http.MethodGet, r.url+"/v1/audit", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer not-a-token")
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	code, stdout, stderr := r.pigeon(t, t.Context(), "audit", "tail", "--token", "auditor-token", "--from", "1")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "auth:token from 203.0.113.7")
}
