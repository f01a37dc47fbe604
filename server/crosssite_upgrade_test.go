package server_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// handshake is what a browser sends for new WebSocket(url) on a page of
// https://evil.example: a GET with Upgrade, Origin and the page's fetch
// metadata, and the browser's ambient credential (a client certificate)
// but never an Authorization header.
var handshake = []string{
	"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==",
	"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "websocket",
}

// TestCrossSiteWebSocketHandshakesOnAPIRoutesAreRefused: a page of another
// origin can point the browser's WebSocket constructor at any path, not
// only /v1/ws. The Upgrade header let such a request past the cross-site
// refusal on every route, whose credential was then looked at: each one
// without a credential an authentication failure of the browser's
// address (a page open in an office's browsers locked the office out),
// and one with the ambient credential served. Only the endpoints that
// upgrade (and check the origin themselves) may skip the refusal.
func TestCrossSiteWebSocketHandshakesOnAPIRoutesAreRefused(t *testing.T) {
	f := newGuardFixture(t, 3, nil)
	for _, path := range []string{"/v1/audit", "/v1/contracts/ctr_x", "/v1/console/events", "/v1/accounts"} {
		for range 3 {
			r := doRequest(t, http.MethodGet, f.url+path, "", "", handshake...)
			require.Equal(t, http.StatusForbidden, r.status, "%s: %s", path, r.body)
			require.Equal(t, pigeon.CodeForbidden, r.code(t))
		}
	}
	// The ambient credential (a token stands for it here) is not served.
	r := doRequest(t, http.MethodGet, f.url+"/v1/audit", "valid-token-Kx9", "", handshake...)
	require.Equal(t, http.StatusForbidden, r.status, "%s", r.body)
	require.Equal(t, pigeon.CodeForbidden, r.code(t))
	// /v1/ws checks the origin itself, before the credential, as before.
	r = doRequest(t, http.MethodGet, f.url+"/v1/ws", "", "", handshake...)
	require.Equal(t, http.StatusForbidden, r.status, "%s", r.body)

	r = doRequest(t, http.MethodGet, f.url+"/v1/audit", "valid-token-Kx9", "")
	require.Equal(t, http.StatusOK, r.status, "the address is not locked out: %s", r.body)
	f.clock.Advance(2 * time.Second)
	recs, err := f.e.Audit(context.Background(), 0, 0)
	require.NoError(t, err)
	for _, rec := range recs {
		require.NotEqual(t, string(pigeon.EventAuthFailed), rec.Type, "nothing was authenticated: %+v", rec)
	}
}
