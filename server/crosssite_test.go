package server_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/server"
)

// TestCrossSiteWritesRefused: a page of another origin can make a browser
// send a POST (a form, or fetch in no-cors mode: no preflight) with the
// browser's ambient credential, a TLS client certificate under mTLS, which
// authenticates before any bearer token. The answer is withheld from the
// page, but what the request does is done: an admin's browser creates an
// account with the role admin, or a receive settles messages. A request
// a browser sends for a page whose origin is neither the server's own nor
// allowed (Options.AllowedOrigins) is refused 403 FORBIDDEN before its
// credential is looked at (a bearer token stands for the ambient
// certificate here), but for a navigation to a page of the server;
// clients that are not browsers send no Origin and are served as ever.
func TestCrossSiteWritesRefused(t *testing.T) {
	e, err := pigeon.New(context.Background(), &pigeon.Options{Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog()})
	require.NoError(t, err)
	_, hs := serve(t, e, &server.Options{AllowedOrigins: []string{"app.example.com"}})
	host := mustHost(t, hs.URL)

	for i, tc := range []struct {
		name    string
		method  string
		headers []string
		served  bool
	}{
		{"another origin", http.MethodPost, []string{"Origin", "https://evil.example"}, false},
		{"another origin, text/plain form", http.MethodPost, []string{"Origin", "https://evil.example", "Content-Type", "text/plain"}, false},
		{"another origin, the server's host on another port", http.MethodPost, []string{"Origin", "http://" + hostOnly(t, host) + ":1"}, false},
		{"an opaque origin (sandboxed frame)", http.MethodPost, []string{"Origin", "null"}, false},
		{"no Origin, but the browser says cross-site", http.MethodPost, []string{"Sec-Fetch-Site", "cross-site"}, false},
		{"no Origin, a sibling site", http.MethodPost, []string{"Sec-Fetch-Site", "same-site"}, false},
		{"DELETE from another origin", http.MethodDelete, []string{"Origin", "https://evil.example"}, false},
		{"no Origin (curl, a service)", http.MethodPost, nil, true},
		{"the server's own origin (the console)", http.MethodPost, []string{"Origin", "http://" + host, "Sec-Fetch-Site", "same-origin"}, true},
		{"the server's own origin, host in another case", http.MethodPost, []string{"Origin", "HTTP://" + host}, true},
		{"same-origin behind a proxy that rewrote Host", http.MethodPost, []string{"Origin", "https://broker.example", "Sec-Fetch-Site", "same-origin"}, true},
		{"an allowed origin", http.MethodPost, []string{"Origin", "https://app.example.com", "Sec-Fetch-Site", "cross-site"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "svc-cross-" + strconv.Itoa(i)
			path, body, want := "/v1/accounts", `{"id":"`+id+`","roles":["admin"]}`, http.StatusCreated
			if tc.method == http.MethodDelete {
				_, err := e.CreateAccount(context.Background(), pigeon.Account{ID: id})
				require.NoError(t, err)
				path, body, want = "/v1/accounts/"+id, "", http.StatusOK
			}
			r := doRequest(t, tc.method, hs.URL+path, "admin-token", body, tc.headers...)
			_, getErr := e.GetAccount(context.Background(), id)
			if tc.served {
				require.Equal(t, want, r.status, "%s", r.body)
				return
			}
			require.Equal(t, http.StatusForbidden, r.status, "%s", r.body)
			require.Equal(t, pigeon.CodeForbidden, r.code(t))
			if tc.method == http.MethodPost {
				require.Error(t, getErr, "no account was created")
			} else {
				require.NoError(t, getErr, "the account was not deleted")
			}
		})
	}

	for _, tc := range []struct {
		name, path string
		headers    []string
		served     bool
	}{
		{"a read in cors mode from another origin", "/v1/accounts", []string{"Origin", "https://evil.example", "Sec-Fetch-Mode", "cors"}, false},
		{"an image of another site's page", "/v1/accounts", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "no-cors", "Sec-Fetch-Dest", "image"}, false},
		{"a frame of another site's page", "/", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "iframe"}, false},
		{"a link followed from another site", "/docs", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document"}, true},
		{"an address typed in", "/v1/accounts", []string{"Sec-Fetch-Site", "none", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document"}, true},
		{"a read of an allowed origin", "/v1/accounts", []string{"Origin", "https://app.example.com", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "cors"}, true},
		{"a read without Origin", "/v1/accounts", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := doRequest(t, http.MethodGet, hs.URL+tc.path, "admin-token", "", tc.headers...)
			if tc.served {
				require.Equal(t, http.StatusOK, r.status, "%s", r.body)
				return
			}
			require.Equal(t, http.StatusForbidden, r.status, "%s", r.body)
			require.Equal(t, pigeon.CodeForbidden, r.code(t))
			require.Empty(t, r.header.Get("Access-Control-Allow-Origin"))
		})
	}
}

// TestCrossSiteRequestsDoNotLockOut: a page of another origin, open in
// the browsers of an office, could make them send requests without a
// credential (images, forms, fetch), each an authentication failure of
// the office's address, and so lock every client behind that address out
// of the broker. Refused before the credential is looked at, they count
// for nothing.
func TestCrossSiteRequestsDoNotLockOut(t *testing.T) {
	f := newGuardFixture(t, 3, nil)
	for _, tc := range []struct {
		method, path string
		headers      []string
	}{
		{http.MethodPost, "/v1/audit/verify", []string{"Origin", "https://evil.example", "Content-Type", "text/plain"}},
		{http.MethodGet, "/v1/audit", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "no-cors", "Sec-Fetch-Dest", "image"}},
		{http.MethodGet, "/v1/audit", []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "cors"}},
	} {
		for range 3 {
			r := doRequest(t, tc.method, f.url+tc.path, "", "", tc.headers...)
			require.GreaterOrEqual(t, r.status, 400, "%s", r.body)
		}
	}
	r := doRequest(t, http.MethodPost, f.url+"/v1/audit/verify", "valid-token-Kx9", "")
	require.Equal(t, http.StatusOK, r.status, "the address is not locked out: %s", r.body)
	r = doRequest(t, http.MethodPost, f.url+"/v1/audit/verify", "", "", "Origin", "https://evil.example")
	require.Equal(t, http.StatusForbidden, r.status, "%s", r.body)
	require.Equal(t, pigeon.CodeForbidden, r.code(t))
	f.clock.Advance(2 * time.Second)
	recs, err := f.e.Audit(context.Background(), 0, 0)
	require.NoError(t, err)
	for _, rec := range recs {
		require.NotEqual(t, string(pigeon.EventAuthFailed), rec.Type, "nothing was authenticated: %+v", rec)
	}
}

func mustHost(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u.Host
}

func hostOnly(t *testing.T, hostport string) string {
	t.Helper()
	u, err := url.Parse("http://" + hostport)
	require.NoError(t, err)
	return u.Hostname()
}
