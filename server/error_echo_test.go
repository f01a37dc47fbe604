package server_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A refusal that names what the caller sent (an unknown query parameter,
// an unknown subject) quotes at most a short prefix of it: an error body
// is never a mirror of the request, whatever its size, on a route open to
// anyone or not.
func TestErrorBodiesDoNotEchoLongInput(t *testing.T) {
	f := newFixture(t)
	long := strings.Repeat("x", 100_000)
	cases := []struct {
		name, method, path, token, body string
		status                          int
		code                            pigeon.Code
	}{
		{"unknown query parameter", http.MethodGet, "/v1/audit?" + long + "=1", "checkout-auditor-token", "", http.StatusBadRequest, pigeon.CodeBadRequest},
		{"unknown query parameter on a route that takes none", http.MethodGet, "/v1/subjects?" + long + "=1", "", "", http.StatusBadRequest, pigeon.CodeBadRequest},
		{"unknown subject in the path, unauthenticated", http.MethodGet, "/v1/subjects/" + long, "", "", http.StatusNotFound, pigeon.CodeSubjectNotFound},
		{"unknown subject in a negotiation", http.MethodPost, "/v1/contracts", "checkout-token", `{"subjects":["` + long[:50_000] + `"]}`, http.StatusNotFound, pigeon.CodeSubjectNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := f.do(t, c.method, c.path, c.token, c.body)
			require.Equal(t, c.status, r.status, "%.300s", r.body)
			require.Equal(t, c.code, r.code(t))
			msg := r.message(t)
			require.LessOrEqual(t, len(msg), 1024, "the message quotes a prefix: %.300s", msg)
			require.Contains(t, msg, "xxxx", "the prefix is still there to recognise")
			require.Less(t, len(r.body), 2048)
		})
	}
	t.Run("a short name is quoted whole", func(t *testing.T) {
		r := f.do(t, http.MethodGet, "/v1/subjects/"+url.PathEscape("no.such.subject"), "", "")
		require.Equal(t, http.StatusNotFound, r.status)
		require.Equal(t, `unknown subject "no.such.subject"`, r.message(t))
	})
}
