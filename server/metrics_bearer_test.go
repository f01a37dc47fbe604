package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/server"
)

// The metrics name the catalog's subjects, the consumer groups and the
// refused credentials; a broker that must not show them to whoever reaches
// the listener puts them behind a token of their own.
func TestMetricsBehindBearerToken(t *testing.T) {
	const token = "metrics-token-0123456789abcdef"
	scraped := 0
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		scraped++
		_, _ = w.Write([]byte("pigeon_up 1\n"))
	})
	e, err := pigeon.New(context.Background(), nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, e.Shutdown(context.Background())) }()
	s := server.New(e, &server.Options{Metrics: server.RequireBearer(token, metrics)})

	cases := []struct {
		name   string
		auth   []string
		status int
	}{
		{"no credential", nil, http.StatusUnauthorized},
		{"the token", []string{"Bearer " + token}, http.StatusOK},
		{"the scheme in another case", []string{"bearer " + token}, http.StatusOK},
		{"another token", []string{"Bearer metrics-token-0123456789abcdeF"}, http.StatusUnauthorized},
		{"a prefix of the token", []string{"Bearer " + token[:len(token)-1]}, http.StatusUnauthorized},
		{"the token and more", []string{"Bearer " + token + "x"}, http.StatusUnauthorized},
		{"basic", []string{"Basic " + token}, http.StatusUnauthorized},
		{"empty bearer", []string{"Bearer "}, http.StatusUnauthorized},
		{"the token twice", []string{"Bearer " + token, "Bearer " + token}, http.StatusUnauthorized},
		{"a wrong one, then the token", []string{"Bearer nope", "Bearer " + token}, http.StatusUnauthorized},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := scraped
			r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			r.Header["Authorization"] = tc.auth
			w := httptest.NewRecorder()
			s.ServeHTTP(w, r)
			require.Equal(t, tc.status, w.Code)
			if tc.status != http.StatusOK {
				require.Equal(t, before, scraped, "the metrics handler ran for a refused request")
				require.Contains(t, w.Header().Get("WWW-Authenticate"), "Bearer")
				require.Contains(t, w.Body.String(), string(pigeon.CodeUnauthenticated))
				require.NotContains(t, w.Body.String(), "pigeon_up")
				return
			}
			require.Equal(t, before+1, scraped)
			require.Equal(t, "pigeon_up 1\n", w.Body.String())
		})
	}
}

// A token that could be guessed, or that no header carries, is refused by
// CheckBearerToken, and RequireBearer given one lets nobody in: an empty
// token must never mean "no token needed".
func TestMetricsBearerTokenChecked(t *testing.T) {
	cases := []struct {
		token string
		ok    bool
	}{
		{"", false},
		{"short", false},
		{"0123456789abcde", false},
		{"0123456789abcdef", true},
		{"0123456789abcdef 0123", false},
		{"0123456789abcdef\n", false},
		{"0123456789abcdef\x00", false},
		{"0123456789abcdefé", false},
		{"AZaz09-._~+/=!#$%&'*^`|", true},
	}
	for _, tc := range cases {
		err := server.CheckBearerToken(tc.token)
		require.Equal(t, tc.ok, err == nil, "%q: %v", tc.token, err)
		if tc.ok {
			continue
		}
		h := server.RequireBearer(tc.token, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			t.Fatalf("served with the refused token %q", tc.token)
		}))
		for _, auth := range []string{"", "Bearer ", "Bearer " + tc.token} {
			r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			if auth != "" {
				r.Header.Set("Authorization", auth)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			require.Equal(t, http.StatusUnauthorized, w.Code, "%q with %q", tc.token, auth)
		}
	}
}
