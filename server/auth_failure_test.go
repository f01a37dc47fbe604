package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testclock"
	"pigeon/server"
	"pigeon/transport/transporttest"
)

// guardFixture is a server on 127.0.0.1 (of options opts) whose engine
// locks a source out after limit refused credentials in a minute, with a
// test clock.
type guardFixture struct {
	e     *pigeon.Engine
	url   string
	clock *testclock.Clock
}

func newGuardFixture(t *testing.T, limit int, opts *server.Options) *guardFixture {
	t.Helper()
	clk := testclock.New(time.Now())
	e, err := pigeon.New(context.Background(), &pigeon.Options{
		Authenticator:    pigeon.NewStaticTokens(pigeon.StaticToken{Token: "valid-token-Kx9", Principal: "svc", Roles: []string{"auditor"}}),
		Now:              clk.Now,
		AuthFailureLimit: limit, AuthFailureWindow: time.Minute,
	})
	require.NoError(t, err)
	_, hs := serve(t, e, opts)
	return &guardFixture{e: e, url: hs.URL, clock: clk}
}

// from is an HTTP client whose connections come from local, an address
// of the loopback network (127.0.0.0/8 on Linux).
func from(t *testing.T, local string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	if c, err := d.Dial("tcp", "127.0.0.1:1"); err != nil && strings.Contains(err.Error(), "assign requested address") {
		t.Skipf("cannot send from %s here: %v", local, err)
	} else if c != nil {
		_ = c.Close()
	}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// get sends GET path with token through c.
func (f *guardFixture) get(t *testing.T, c *http.Client, path, token string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.url+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// authFailed returns the refs of f's auth.failed records of code,
// checking that no token or guess is in the log.
func (f *guardFixture) authFailed(t *testing.T, code pigeon.Code) []string {
	t.Helper()
	return transporttest.AuthFailed(t, f.e, code, "Kx9", "guess")
}

// TestAuthFailuresAuditedOverHTTP: every 401 leaves an auth.failed record
// with the method and the client's IP, never the token; a flood of 200
// guesses from one address is a handful of records.
func TestAuthFailuresAuditedOverHTTP(t *testing.T) {
	f := newGuardFixture(t, -1, nil)
	c := from(t, "127.0.0.1")
	for i := range 200 {
		r := f.get(t, c, "/v1/audit", "guess-"+strconv.Itoa(i)+"-Kx9")
		require.Equal(t, http.StatusUnauthorized, r.status)
		require.Equal(t, pigeon.CodeUnauthenticated, r.code(t))
	}
	require.Equal(t, []string{"auth:token from 127.0.0.1"}, f.authFailed(t, pigeon.CodeUnauthenticated), "the rest of the second is still counted")
	f.clock.Advance(2 * time.Second)
	require.Equal(t, []string{"auth:token from 127.0.0.1", "coalesced:199 auth:token from 127.0.0.1"}, f.authFailed(t, pigeon.CodeUnauthenticated))
	r := f.get(t, c, "/v1/audit", "valid-token-Kx9")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
}

// TestAuthLockoutOverHTTP: after AuthFailureLimit refused tokens from one
// address in the window, its requests are answered 429 RATE_LIMITED with
// Retry-After before the token is checked, a valid one included, and so
// are its WebSocket upgrades (one count per address for the engine);
// another address authenticates as usual, and so does the locked one once
// the window has passed. The lockout refusals are audited, coalesced.
func TestAuthLockoutOverHTTP(t *testing.T) {
	f := newGuardFixture(t, 3, nil)
	attacker, other := from(t, "127.0.0.1"), from(t, "127.0.0.2")
	for i := range 3 {
		require.Equal(t, http.StatusUnauthorized, f.get(t, attacker, "/v1/audit", "guess-"+strconv.Itoa(i)).status)
	}
	for _, tc := range []struct {
		name, path string
		header     []string
	}{
		{"API route", "/v1/audit", nil},
		{"WebSocket upgrade", "/v1/ws", []string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := f.get(t, attacker, tc.path, "valid-token-Kx9", tc.header...)
			require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r.body)
			require.Equal(t, pigeon.CodeRateLimited, r.code(t))
			require.Equal(t, "60", r.header.Get("Retry-After"))
		})
	}
	require.Equal(t, http.StatusOK, f.get(t, other, "/v1/audit", "valid-token-Kx9").status, "another address is unaffected")
	f.clock.Advance(30 * time.Second)
	r := f.get(t, attacker, "/v1/audit", "valid-token-Kx9")
	require.Equal(t, http.StatusTooManyRequests, r.status)
	require.Equal(t, "30", r.header.Get("Retry-After"))
	f.clock.Advance(30 * time.Second)
	require.Equal(t, http.StatusOK, f.get(t, attacker, "/v1/audit", "valid-token-Kx9").status, "the window has passed")
	require.Equal(t, []string{"auth:token from 127.0.0.1", "coalesced:1 auth:token from 127.0.0.1", "auth:token from 127.0.0.1"},
		f.authFailed(t, pigeon.CodeRateLimited))
}

// TestTrustedProxyNamesTheClient: behind a trusted proxy, refused
// credentials count against the client its X-Forwarded-For names, not
// against the proxy: that client is locked out, whatever it writes to the
// left of the header, while another client behind the same proxy
// authenticates; the records name the client. Without TrustedProxies the
// header is ignored and the peer is the source.
func TestTrustedProxyNamesTheClient(t *testing.T) {
	f := newGuardFixture(t, 3, &server.Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	proxy := from(t, "127.0.0.1")
	for i := range 3 {
		r := f.get(t, proxy, "/v1/audit", "guess-"+strconv.Itoa(i), "X-Forwarded-For", "203.0.113.7")
		require.Equal(t, http.StatusUnauthorized, r.status)
	}
	for _, xff := range []string{"203.0.113.7", "203.0.113.9, 203.0.113.7"} {
		r := f.get(t, proxy, "/v1/audit", "valid-token-Kx9", "X-Forwarded-For", xff)
		require.Equal(t, http.StatusTooManyRequests, r.status, "X-Forwarded-For %q: %s", xff, r.body)
	}
	r := f.get(t, proxy, "/v1/audit", "valid-token-Kx9", "X-Forwarded-For", "203.0.113.9")
	require.Equal(t, http.StatusOK, r.status, "another client behind the proxy: %s", r.body)
	require.Equal(t, []string{"auth:token from 203.0.113.7"}, f.authFailed(t, pigeon.CodeUnauthenticated))

	direct := newGuardFixture(t, 3, nil)
	r = direct.get(t, proxy, "/v1/audit", "guess", "X-Forwarded-For", "203.0.113.7")
	require.Equal(t, http.StatusUnauthorized, r.status)
	require.Equal(t, []string{"auth:token from 127.0.0.1"}, direct.authFailed(t, pigeon.CodeUnauthenticated), "no trusted proxy: the header is ignored")
}
