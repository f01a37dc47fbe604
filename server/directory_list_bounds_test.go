package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// roleNamesOf is n role names.
func roleNamesOf(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "role-" + strconv.Itoa(i)
	}
	return out
}

// jsonBody is v encoded.
func jsonBody(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// TestAdminDirectoryWritesBoundEveryList: over the admin API, a list a
// write of the access directory takes one entry past its bound is 400
// INVALID_ARGUMENT, and the directory holds what it held, read back over
// the API; at the bound it is accepted. Before, PUT /v1/roles/{name} took
// a role of any number of permissions, each of any number of operations.
func TestAdminDirectoryWritesBoundEveryList(t *testing.T) {
	const many = "spiffe://test/many"
	manyPath := "/v1/accounts/" + url.PathEscape(many)
	permissions := func(n int) []map[string]any {
		out := make([]map[string]any, n)
		for i := range out {
			out[i] = map[string]any{"subject": "subject-" + strconv.Itoa(i), "operations": []string{"publish"}}
		}
		return out
	}
	operations := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = string(pigeon.Operations[i%len(pigeon.Operations)])
		}
		return out
	}
	roleHeld := func(t *testing.T, f *fixture, count func(perms []any) int) int {
		r := f.do(t, http.MethodGet, "/v1/roles/wide", "admin-token", "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		return count(r.json(t)["role"].(map[string]any)["permissions"].([]any))
	}
	accountRoles := func(t *testing.T, f *fixture) int {
		r := f.do(t, http.MethodGet, manyPath, "admin-token", "")
		if r.status == http.StatusNotFound {
			return 0
		}
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		return len(r.json(t)["account"].(map[string]any)["roles"].([]any))
	}
	defineRole := func(t *testing.T, f *fixture) {
		r := f.do(t, http.MethodPut, "/v1/roles/wide", "admin-token", jsonBody(t, map[string]any{"permissions": permissions(1)}))
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	}
	createMany := func(t *testing.T, f *fixture) {
		r := f.do(t, http.MethodPost, "/v1/accounts", "admin-token", jsonBody(t, map[string]any{"id": many, "roles": roleNamesOf(pigeon.MaxPrincipalRoles)}))
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	}
	cases := []struct {
		name  string
		bound int
		ok    int // the status at the bound
		setup func(t *testing.T, f *fixture)
		write func(t *testing.T, f *fixture, n int) response
		held  func(t *testing.T, f *fixture) int
	}{
		{
			name: "PUT /v1/roles/{name}: permissions", bound: pigeon.MaxRolePermissions, ok: http.StatusOK, setup: defineRole,
			write: func(t *testing.T, f *fixture, n int) response {
				return f.do(t, http.MethodPut, "/v1/roles/wide", "admin-token", jsonBody(t, map[string]any{"permissions": permissions(n)}))
			},
			held: func(t *testing.T, f *fixture) int { return roleHeld(t, f, func(p []any) int { return len(p) }) },
		},
		{
			name: "PUT /v1/roles/{name}: a permission's operations", bound: pigeon.MaxPermissionOperations, ok: http.StatusOK, setup: defineRole,
			write: func(t *testing.T, f *fixture, n int) response {
				body := map[string]any{"permissions": []map[string]any{{"subject": "rooms.chat", "operations": operations(n)}}}
				return f.do(t, http.MethodPut, "/v1/roles/wide", "admin-token", jsonBody(t, body))
			},
			held: func(t *testing.T, f *fixture) int {
				return roleHeld(t, f, func(p []any) int { return len(p[0].(map[string]any)["operations"].([]any)) })
			},
		},
		{
			name: "POST /v1/accounts: roles", bound: pigeon.MaxPrincipalRoles, ok: http.StatusCreated, setup: func(*testing.T, *fixture) {},
			write: func(t *testing.T, f *fixture, n int) response {
				return f.do(t, http.MethodPost, "/v1/accounts", "admin-token", jsonBody(t, map[string]any{"id": many, "roles": roleNamesOf(n)}))
			},
			held: accountRoles,
		},
		{
			name: "PUT /v1/accounts/{id}/roles/{role}", bound: pigeon.MaxPrincipalRoles, ok: http.StatusOK, setup: createMany,
			// The n-th role: the account holds the n-1 before it.
			write: func(t *testing.T, f *fixture, n int) response {
				return f.do(t, http.MethodPut, manyPath+"/roles/"+roleNamesOf(n)[n-1], "admin-token", "")
			},
			held: accountRoles,
		},
		{
			name: "POST /v1/grants: roles", bound: pigeon.MaxPrincipalRoles, ok: http.StatusCreated, setup: createMany,
			write: func(t *testing.T, f *fixture, n int) response {
				return f.do(t, http.MethodPost, "/v1/grants", "admin-token", jsonBody(t, map[string]any{"account": many, "roles": roleNamesOf(n), "ttlMs": 3600000}))
			},
			// A grant is not read back over the API: its record of
			// issue is counted, the roles it was asked for times as
			// many.
			held: func(t *testing.T, f *fixture) int {
				recs, err := f.e.Audit(context.Background(), 0, 0)
				require.NoError(t, err)
				n := 0
				for _, rec := range recs {
					if rec.Type == string(pigeon.EventGrantIssued) {
						n += pigeon.MaxPrincipalRoles
					}
				}
				return n
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.setup(t, f)
			held := tc.held(t, f)
			r := tc.write(t, f, tc.bound+1)
			require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
			require.Equal(t, pigeon.CodeInvalidArgument, r.code(t))
			require.Equal(t, held, tc.held(t, f), "the directory holds what it held")

			r = tc.write(t, f, tc.bound)
			require.Equal(t, tc.ok, r.status, "at the bound: %s", r.body)
			require.Equal(t, tc.bound, tc.held(t, f))
		})
	}
}
