package server_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestPathsThatEscapeUnreservedCharactersAreNotRouted: a route's name
// spelled with a percent-escape of a letter, a digit, "-", ".", "_" or
// "~" (/v1/%61udit, /v1/%61ccounts) was served as the route itself, so a
// proxy or a firewall in front that allows or denies by path (many match
// the path as sent, without decoding it) saw another path than the one
// the broker served. RFC 3986 (6.2.2.2) makes such escapes the same URI
// as the character; no client library writes them. Like the other paths
// not in canonical form, they are answered 404 NOT_FOUND; escapes of
// reserved characters in a path parameter (an account id's %3A%2F%2F)
// are served as before.
func TestPathsThatEscapeUnreservedCharactersAreNotRouted(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct{ method, path, token string }{
		{"GET", "/v1/%61udit", "checkout-auditor-token"},
		{"GET", "/v1/%61UDIT", "checkout-auditor-token"},
		{"GET", "/v1/audi%74", "checkout-auditor-token"},
		{"GET", "/v1/quarantin%65", "checkout-auditor-token"},
		{"GET", "/%761/accounts", "admin-token"},
		{"GET", "/v1/subject%73", ""},
		{"GET", "/%68ealth", ""},
		{"GET", "/v1/subjects/payments%2eauthorize", ""},
		{"GET", "/v1/subjects/payments%2Eauthorize", ""},
		{"GET", "/v1/subjects/payments.authoriz%65", ""},
		{"GET", "/v1/accounts/a%5Fb", "admin-token"},
		{"GET", "/v1/accounts/a%7eb", "admin-token"},
		{"GET", "/v1/accounts/a%2Db", "admin-token"},
		{"GET", "/v1/accounts/%30", "admin-token"},
		{"POST", "/v1/%63ontracts", "checkout-token"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r := f.do(t, tc.method, tc.path, tc.token, `{"subjects":["payments.authorize"]}`)
			require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)
			require.Equal(t, pigeon.CodeNotFound, r.code(t))
		})
	}
	// Escapes of other characters stay a path parameter's own.
	r := f.do(t, "GET", "/v1/accounts/spiffe%3A%2F%2Fnobody%40x", "admin-token", "")
	require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)
	require.Contains(t, r.message(t), "spiffe://nobody@x", "the id is read unescaped: %s", r.body)
	r = f.do(t, "GET", "/v1/subjects/payments.authorize", "", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
}
