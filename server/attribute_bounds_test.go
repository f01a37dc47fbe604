package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// POST /v1/accounts refuses an account whose attributes are more than
// pigeon.MaxAccountAttributes, or whose attribute name or value is longer
// than pigeon.MaxAttributeNameLength or pigeon.MaxAttributeValueLength
// bytes: 400 INVALID_ARGUMENT, no account and no account.created record.
// Before, the admin route stored them as given. At each bound it is
// accepted.
func TestAdminCreateAccountBoundsAttributes(t *testing.T) {
	many := func(n int) map[string]string {
		m := make(map[string]string, n)
		for i := range n {
			m["a"+strconv.Itoa(i)] = "x"
		}
		return m
	}
	cases := []struct {
		name   string
		attrs  map[string]string
		status int
	}{
		{"too many", many(pigeon.MaxAccountAttributes + 1), http.StatusBadRequest},
		{"name too long", map[string]string{strings.Repeat("n", pigeon.MaxAttributeNameLength+1): "x"}, http.StatusBadRequest},
		{"value too long", map[string]string{"team": strings.Repeat("v", pigeon.MaxAttributeValueLength+1)}, http.StatusBadRequest},
		{"as many as allowed", many(pigeon.MaxAccountAttributes), http.StatusCreated},
		{"longest name and value", map[string]string{
			strings.Repeat("n", pigeon.MaxAttributeNameLength): strings.Repeat("v", pigeon.MaxAttributeValueLength)}, http.StatusCreated},
	}
	f := newFixture(t)
	created := 0
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := "spiffe://test/attrs" + strconv.Itoa(i)
			body, err := json.Marshal(map[string]any{"id": id, "attributes": tc.attrs})
			require.NoError(t, err)
			r := f.do(t, http.MethodPost, "/v1/accounts", "admin-token", string(body))
			require.Equal(t, tc.status, r.status, "%s", r.body)
			got := f.do(t, http.MethodGet, "/v1/accounts/"+url.PathEscape(id), "admin-token", "")
			if tc.status != http.StatusCreated {
				require.Equal(t, pigeon.CodeInvalidArgument, r.code(t))
				require.Equal(t, http.StatusNotFound, got.status, "no account was created")
				return
			}
			created++
			require.Equal(t, http.StatusOK, got.status, "%s", got.body)
			require.Len(t, got.json(t)["account"].(map[string]any)["attributes"], len(tc.attrs))
		})
	}
	recs, err := f.e.Audit(context.Background(), 0, 0)
	require.NoError(t, err)
	n := 0
	for _, rec := range recs {
		if rec.Type == string(pigeon.EventAccountCreated) && strings.HasPrefix(rec.Principal, "spiffe://test/attrs") {
			n++
		}
	}
	require.Equal(t, created, n, "only the accounts accepted are audited")
}
