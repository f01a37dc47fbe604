package server_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestBearerTokenIsTakenAsSent: the token after "Bearer " loses only the
// spaces and tabs HTTP puts around a header value; other white space
// (U+00A0, U+2003, U+3000, which strings.TrimSpace also cut) stays part of
// it, so a valid token followed by one is another token, refused: a
// gateway that refuses a token byte for byte never sees a second spelling
// of it that the broker accepts.
func TestBearerTokenIsTakenAsSent(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name, header string
		status       int
	}{
		{"as sent", "Bearer admin-token", http.StatusOK},
		{"spaces and a tab around", "Bearer  \tadmin-token \t", http.StatusOK},
		{"a no-break space after", "Bearer admin-token\u00a0", http.StatusUnauthorized},
		{"an em space before", "Bearer \u2003admin-token", http.StatusUnauthorized},
		{"an ideographic space after", "Bearer admin-token\u3000", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := f.do(t, http.MethodGet, "/v1/accounts", "", "", "Authorization", tc.header)
			require.Equal(t, tc.status, r.status, "%s", r.body)
			if tc.status == http.StatusUnauthorized {
				require.Equal(t, pigeon.CodeUnauthenticated, r.code(t))
			}
		})
	}
}
