package cli

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// serve --ipv6-site-prefix and --ipv6-site-factor (ipv6_site_prefix and
// ipv6_site_factor in the config file) set how the per-source limits
// count the /64s of one IPv6 site together: parsed from either, 0 turning
// it off, a bad value refused at start, and in force on a real listener,
// where the lockout of refused credentials (its clients named by a
// trusted proxy's X-Forwarded-For) locks a site out after a factor of 1
// times the limit, a /56 site leaves the next /56 alone, and off counts
// each /64 alone.
func TestServeSiteLimitOptions(t *testing.T) {
	cfg, _, ok := parseServe(nil, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, pigeon.SiteLimit{}, cfg.site, "the default: /48s at 16 times")
	cfg, _, ok = parseServe([]string{"--ipv6-site-prefix", "56", "--ipv6-site-factor", "4"}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, pigeon.SiteLimit{Bits: 56, Factor: 4}, cfg.site)
	cfg, _, ok = parseServe([]string{"--ipv6-site-prefix", "0"}, io.Discard, nil)
	require.True(t, ok)
	require.True(t, cfg.site.Off(), "0: each /64 alone")
	cfg, _, ok = parseServe([]string{"--config", writeConfig(t, "ipv6_site_prefix: 0\nipv6_site_factor: 2\n")}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, pigeon.SiteLimit{Bits: -1, Factor: 2}, cfg.site)
	cfg, _, ok = parseServe([]string{"--config", writeConfig(t, "ipv6_site_prefix: 40\n"), "--ipv6-site-prefix", "52"}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, 52, cfg.site.Bits, "the flag wins over the file")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ipv6-site-prefix", "64"}, "not an IPv6 site prefix length"},
		{[]string{"--ipv6-site-prefix", "-1"}, "not an IPv6 site prefix length"},
		{[]string{"--ipv6-site-prefix", "wide"}, "not an IPv6 site prefix length"},
		{[]string{"--ipv6-site-factor", "0"}, "not an IPv6 site factor"},
		{[]string{"--ipv6-site-factor", "-3"}, "not an IPv6 site factor"},
		{[]string{"--config", writeConfig(t, "addr: 127.0.0.1:0\nipv6_site_prefix: 128\n")}, ":2: ipv6_site_prefix: "},
		{[]string{"--config", writeConfig(t, "ipv6_site_factor: -1\n")}, ":1: ipv6_site_factor must be at least 1"},
		{[]string{"--config", writeConfig(t, "ipv6_site_factor: 1.5\n")}, "not an integer"},
	} {
		var stderr strings.Builder
		_, code, ok := parseServe(tc.args, &stderr, nil)
		require.False(t, ok, tc.args)
		require.Equal(t, 2, code, tc.args)
		require.Contains(t, stderr.String(), tc.want, tc.args)
	}
	err := serve(t.Context(), serveConfig{addr: "127.0.0.1:0", site: pigeon.SiteLimit{Bits: 64}}, io.Discard, io.Discard)
	require.ErrorContains(t, err, "site prefix length 64", "a bad value given in code is refused at start too")

	// status asks /v1/audit with token as the client a trusted proxy
	// names.
	status := func(t *testing.T, r *running, client, token string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, r.url+"/v1/audit", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("X-Forwarded-For", client)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name string
		site pigeon.SiteLimit
		// the status of a valid token from another /64 of the /56
		// (2001:db8:7:3::/64) and from the next /56 of the /48
		// (2001:db8:7:100::/64), once two /64s of the first /56 had
		// a refusal each
		sameSite, next56 int
	}{
		{"default", pigeon.SiteLimit{}, http.StatusOK, http.StatusOK},
		{"factor 1", pigeon.SiteLimit{Factor: 1}, http.StatusTooManyRequests, http.StatusTooManyRequests},
		{"/56 factor 1", pigeon.SiteLimit{Bits: 56, Factor: 1}, http.StatusTooManyRequests, http.StatusOK},
		{"off", pigeon.SiteLimit{Bits: -1, Factor: 1}, http.StatusOK, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startServe(t, serveConfig{trustedProxies: []string{"127.0.0.0/8"}, maxFailures: 2, site: tc.site})
			require.Equal(t, http.StatusUnauthorized, status(t, r, "2001:db8:7:1::1", "guess"))
			require.Equal(t, http.StatusUnauthorized, status(t, r, "2001:db8:7:2::1", "guess"))
			require.Equal(t, tc.sameSite, status(t, r, "2001:db8:7:3::1", "auditor-token"))
			require.Equal(t, tc.next56, status(t, r, "2001:db8:7:100::1", "auditor-token"))
			require.Equal(t, http.StatusOK, status(t, r, "2001:db8:8::1", "auditor-token"), "another /48")
		})
	}
}
