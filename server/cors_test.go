package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/server"
)

// A browser page on an allowed origin gets CORS headers on its calls and
// an answer to its preflight; any other origin gets none, so the browser
// withholds the answer, and its calls are refused 403 FORBIDDEN before
// their credential is looked at (TestCrossSiteWritesRefused). A call
// without Origin (not from a browser) is served. The credential still
// decides what a call may do.
func TestCORS(t *testing.T) {
	e, err := pigeon.New(context.Background(), &pigeon.Options{Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog()})
	require.NoError(t, err)
	defer func() { require.NoError(t, e.Shutdown(context.Background())) }()
	s := server.New(e, &server.Options{AllowedOrigins: []string{"app.example.com", "*.tools.example:8443", "https://secure.example"}})
	plain := server.New(e, nil)

	call := func(s *server.Server, method, origin string, preflight bool) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/v1/subjects", nil)
		r.Header.Set("Authorization", "Bearer auditor-token")
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		if preflight {
			r.Header.Set("Access-Control-Request-Method", "GET")
			r.Header.Set("Access-Control-Request-Headers", "authorization")
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		return w
	}
	for _, tc := range []struct {
		name    string
		s       *server.Server
		origin  string
		allowed bool
	}{
		{"named host", s, "http://app.example.com", true},
		{"named host, other case", s, "http://APP.example.com", true},
		{"wildcard host and port", s, "https://ci.tools.example:8443", true},
		{"wildcard host, other port", s, "https://ci.tools.example:9443", false},
		{"scheme pattern", s, "https://secure.example", true},
		{"scheme pattern, other scheme", s, "http://secure.example", false},
		{"unknown origin", s, "http://evil.example", false},
		{"not a URL", s, "::nonsense", false},
		{"no origin", s, "", false},
		{"server without allowed origins", plain, "http://app.example.com", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := call(tc.s, http.MethodGet, tc.origin, false)
			if tc.allowed || tc.origin == "" {
				require.Equal(t, http.StatusOK, w.Code, "%s", w.Body)
			} else {
				require.Equal(t, http.StatusForbidden, w.Code, "a page of another origin: %s", w.Body)
			}
			pre := call(tc.s, http.MethodOptions, tc.origin, true)
			if !tc.allowed {
				require.Empty(t, w.Header().Get("Access-Control-Allow-Origin"))
				require.Empty(t, pre.Header().Get("Access-Control-Allow-Origin"))
				require.NotEqual(t, http.StatusNoContent, pre.Code, "no preflight answer")
				return
			}
			require.Equal(t, tc.origin, w.Header().Get("Access-Control-Allow-Origin"))
			require.Contains(t, w.Header().Values("Vary"), "Origin")
			require.Contains(t, w.Header().Get("Access-Control-Expose-Headers"), "X-Request-Id")
			require.Equal(t, http.StatusNoContent, pre.Code)
			require.Equal(t, tc.origin, pre.Header().Get("Access-Control-Allow-Origin"))
			require.Contains(t, pre.Header().Get("Access-Control-Allow-Headers"), "Authorization")
			require.Contains(t, pre.Header().Get("Access-Control-Allow-Headers"), "X-Pigeon-Contract")
			require.Contains(t, pre.Header().Get("Access-Control-Allow-Methods"), "POST")
		})
	}
	// An allowed origin's call without a credential is refused as ever,
	// with headers that let the page read the refusal.
	r := httptest.NewRequest(http.MethodGet, "/v1/quarantine", nil)
	r.Header.Set("Origin", "http://app.example.com")
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.Equal(t, "http://app.example.com", w.Header().Get("Access-Control-Allow-Origin"))
}
