package server_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestQueryIsReadStrictly: a query parameter a route does not take, one
// given twice, or a query string that cannot be read is refused
// BAD_REQUEST, naming what is wrong, before the route runs; the
// parameters a route takes still work.
func TestQueryIsReadStrictly(t *testing.T) {
	f := newFixture(t)
	checkout := f.contract(t, "checkout-token", "payments.authorize")
	tests := []struct {
		name, method, path, token string
		headers                   []string
		status                    int
		says                      string // in the refusal's message
	}{
		{"audit takes from and max", "GET", "/v1/audit?from=1&max=2", "auditor-token", nil, 200, ""},
		{"an empty query string", "GET", "/v1/audit?", "auditor-token", nil, 200, ""},
		{"quarantine takes since, after and max", "GET", "/v1/quarantine?since=2026-01-01T00:00:00Z&after=qr_x&max=5", "auditor-token", nil, 200, ""},
		{"a parameter given twice", "GET", "/v1/audit?from=5&from=1", "auditor-token", nil, 400, "from is given 2 times"},
		{"a parameter given twice, once empty", "GET", "/v1/quarantine?after=qr_x&after=", "auditor-token", nil, 400, "after is given 2 times"},
		{"a mistyped parameter", "GET", "/v1/audit?form=5", "auditor-token", nil, 400, `"form" is not taken here; this route takes from, max`},
		{"a parameter of another route", "GET", "/v1/audit?since=2026-01-01T00:00:00Z", "auditor-token", nil, 400, `"since" is not taken here`},
		{"a query on a route that takes none", "POST", "/v1/messages?contractId=x", "checkout-token", []string{"x-pigeon-contract", checkout}, 400, "this route takes none"},
		{"a query on a public route", "GET", "/v1/subjects?x", "", nil, 400, `"x" is not taken here`},
		{"an invalid escape", "GET", "/v1/audit?max=%zz", "auditor-token", nil, 400, "invalid %-escape"},
		{"a semicolon separator", "GET", "/v1/audit?from=1;max=2", "auditor-token", nil, 400, "';'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := f.do(t, tc.method, tc.path, tc.token, "", tc.headers...)
			require.Equal(t, tc.status, r.status, "body %s", r.body)
			if tc.status == http.StatusBadRequest {
				require.Equal(t, pigeon.CodeBadRequest, r.code(t))
				require.Contains(t, r.message(t), tc.says)
			}
		})
	}
}
