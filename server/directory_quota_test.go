package server_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// quotaFixture is a server on the test catalog, as newFixture's, whose
// engine takes the directory quotas quotas sets.
func quotaFixture(t *testing.T, quotas func(o *pigeon.Options)) *fixture {
	t.Helper()
	o := &pigeon.Options{Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: testCatalog(), Region: "uk"}
	quotas(o)
	e, err := pigeon.New(context.Background(), o)
	require.NoError(t, err)
	s, hs := serve(t, e, nil)
	return &fixture{e: e, s: s, hs: hs}
}

// grantsIssued is how many grant.issued records e's audit log holds.
func grantsIssued(t *testing.T, e *pigeon.Engine) int {
	t.Helper()
	recs, err := e.Audit(context.Background(), 0, 0)
	require.NoError(t, err)
	n := 0
	for _, rec := range recs {
		if rec.Type == string(pigeon.EventGrantIssued) {
			n++
		}
	}
	return n
}

// TestAdminDirectoryQuotas: over the admin API, one account, role or
// live grant of an account past its quota (pigeon.Options.MaxAccounts,
// MaxRoles, MaxGrantsPerAccount) is 400 INVALID_ARGUMENT, and the
// directory holds what it held, read back over the API; a place freed (a
// deletion, a revocation) takes one more. Before, an admin token created
// them without end.
func TestAdminDirectoryQuotas(t *testing.T) {
	const quota = 2
	const holder = "spiffe://test/holder"
	listed := func(t *testing.T, f *fixture, path, member string) int {
		r := f.do(t, http.MethodGet, path, "admin-token", "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		return len(r.json(t)[member].([]any))
	}
	cases := []struct {
		name   string
		set    func(o *pigeon.Options)
		setup  func(t *testing.T, f *fixture)
		create func(t *testing.T, f *fixture, i int) response
		ok     int // the status of a creation
		// ref names what create made (from its answer); free frees it.
		ref  func(t *testing.T, r response, i int) string
		free func(t *testing.T, f *fixture, ref string) response
		held func(t *testing.T, f *fixture) int
	}{
		{
			name: "POST /v1/accounts", set: func(o *pigeon.Options) { o.MaxAccounts = quota }, ok: http.StatusCreated,
			setup: func(*testing.T, *fixture) {},
			create: func(t *testing.T, f *fixture, i int) response {
				return f.do(t, http.MethodPost, "/v1/accounts", "admin-token", jsonBody(t, map[string]any{"id": "spiffe://test/a" + strconv.Itoa(i)}))
			},
			ref: func(_ *testing.T, _ response, i int) string { return "spiffe://test/a" + strconv.Itoa(i) },
			free: func(t *testing.T, f *fixture, id string) response {
				return f.do(t, http.MethodDelete, "/v1/accounts/"+url.PathEscape(id), "admin-token", "")
			},
			held: func(t *testing.T, f *fixture) int { return listed(t, f, "/v1/accounts", "accounts") },
		},
		{
			name: "PUT /v1/roles/{name}", set: func(o *pigeon.Options) { o.MaxRoles = quota }, ok: http.StatusOK,
			setup: func(*testing.T, *fixture) {},
			create: func(t *testing.T, f *fixture, i int) response {
				body := map[string]any{"permissions": []map[string]any{{"subject": "orders.events", "operations": []string{"publish"}}}}
				return f.do(t, http.MethodPut, "/v1/roles/role-"+strconv.Itoa(i), "admin-token", jsonBody(t, body))
			},
			ref: func(_ *testing.T, _ response, i int) string { return "role-" + strconv.Itoa(i) },
			free: func(t *testing.T, f *fixture, name string) response {
				return f.do(t, http.MethodDelete, "/v1/roles/"+name, "admin-token", "")
			},
			held: func(t *testing.T, f *fixture) int { return listed(t, f, "/v1/roles", "roles") },
		},
		{
			name: "POST /v1/grants", set: func(o *pigeon.Options) { o.MaxGrantsPerAccount = quota }, ok: http.StatusCreated,
			setup: func(t *testing.T, f *fixture) {
				r := f.do(t, http.MethodPost, "/v1/accounts", "admin-token", jsonBody(t, map[string]any{"id": holder, "roles": []string{"member"}}))
				require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
			},
			create: func(t *testing.T, f *fixture, _ int) response {
				return f.do(t, http.MethodPost, "/v1/grants", "admin-token", jsonBody(t, map[string]any{"account": holder, "roles": []string{"member"}, "ttlMs": 3600000}))
			},
			ref: func(t *testing.T, r response, _ int) string { return r.json(t)["jti"].(string) },
			free: func(t *testing.T, f *fixture, jti string) response {
				return f.do(t, http.MethodDelete, "/v1/grants/"+jti, "admin-token", "")
			},
			// Grants are not listed over the API: their records of
			// issue are counted.
			held: func(t *testing.T, f *fixture) int { return grantsIssued(t, f.e) },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := quotaFixture(t, tc.set)
			tc.setup(t, f)
			var refs []string
			for i := range quota {
				r := tc.create(t, f, i)
				require.Equal(t, tc.ok, r.status, "within the quota: %s", r.body)
				refs = append(refs, tc.ref(t, r, i))
			}
			held := tc.held(t, f)

			r := tc.create(t, f, quota)
			require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
			require.Equal(t, pigeon.CodeInvalidArgument, r.code(t))
			require.Contains(t, string(r.body), "at most "+strconv.Itoa(quota))
			require.Equal(t, held, tc.held(t, f), "the directory holds what it held")

			require.Equal(t, http.StatusOK, tc.free(t, f, refs[0]).status)
			r = tc.create(t, f, quota)
			require.Equal(t, tc.ok, r.status, "a place freed takes one more: %s", r.body)
			r = tc.create(t, f, quota+1)
			require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
			require.Equal(t, pigeon.CodeInvalidArgument, r.code(t))
		})
	}
}

// TestAdminRolePermissionSubjectIsBounded: PUT /v1/roles/{name} refuses
// a permission whose subject is longer than a message's subject may be
// (pigeon.MaxEnvelopeField bytes): 400 INVALID_ARGUMENT, no role
// written, the subject not echoed. Before, only the body's limit bounded
// it. At the bound it is accepted.
func TestAdminRolePermissionSubjectIsBounded(t *testing.T) {
	f := newFixture(t)
	put := func(subject string) response {
		body := map[string]any{"permissions": []map[string]any{{"subject": subject, "operations": []string{"publish"}}}}
		return f.do(t, http.MethodPut, "/v1/roles/wide", "admin-token", jsonBody(t, body))
	}
	for _, n := range []int{pigeon.MaxEnvelopeField + 1, 512 << 10} {
		r := put(strings.Repeat("s", n))
		require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body[:min(len(r.body), 512)])
		require.Equal(t, pigeon.CodeInvalidArgument, r.code(t))
		require.Less(t, len(r.body), 1024, "the subject is not echoed")
		require.Equal(t, http.StatusNotFound, f.do(t, http.MethodGet, "/v1/roles/wide", "admin-token", "").status, "no role was written")
	}
	r := put(strings.Repeat("s", pigeon.MaxEnvelopeField))
	require.Equal(t, http.StatusOK, r.status, "at the bound: %s", r.body)
}
