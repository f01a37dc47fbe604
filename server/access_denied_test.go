package server_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// TestRoleRefusalsAreAudited: every route a principal is refused for want
// of a role answers 403 FORBIDDEN and leaves an access.denied record with
// the caller and the route (its pattern, not the path the caller chose),
// so an auditor sees who tried what they may not. A run of them from one
// principal is coalesced like other refusals of who asks: the clock moves
// past the window between calls, so each is written in full.
func TestRoleRefusalsAreAudited(t *testing.T) {
	f := newFixture(t)
	routes := []struct{ method, path, pattern string }{
		{http.MethodGet, "/v1/accounts", "/v1/accounts"},
		{http.MethodPost, "/v1/accounts", "/v1/accounts"},
		{http.MethodGet, "/v1/accounts/svc-x", "/v1/accounts/{id}"},
		{http.MethodDelete, "/v1/accounts/svc-x", "/v1/accounts/{id}"},
		{http.MethodPut, "/v1/accounts/svc-x/roles/notifier", "/v1/accounts/{id}/roles/{role}"},
		{http.MethodDelete, "/v1/accounts/svc-x/roles/notifier", "/v1/accounts/{id}/roles/{role}"},
		{http.MethodPut, "/v1/accounts/svc-x/keys", "/v1/accounts/{id}/keys"}, // another account's
		{http.MethodGet, "/v1/roles", "/v1/roles"},
		{http.MethodPut, "/v1/roles/notifier", "/v1/roles/{name}"},
		{http.MethodPost, "/v1/grants", "/v1/grants"},
		{http.MethodDelete, "/v1/grants/gr_x", "/v1/grants/{jti}"},
		{http.MethodDelete, "/v1/subjects/retired.events/messages", "/v1/subjects/{name}/messages"},
		{http.MethodGet, "/v1/audit", "/v1/audit"},
		{http.MethodPost, "/v1/audit/verify", "/v1/audit/verify"},
		{http.MethodGet, "/v1/quarantine", "/v1/quarantine"},
		{http.MethodGet, "/v1/quarantine/q_x", "/v1/quarantine/{id}"},
		{http.MethodPost, "/v1/quarantine/q_x/release", "/v1/quarantine/{id}/release"},
		{http.MethodGet, "/v1/console/events", "/v1/console/events"},
	}
	var want []string
	for _, rt := range routes {
		r := f.do(t, rt.method, rt.path, "orders-token", "{}")
		require.Equal(t, http.StatusForbidden, r.status, "%s %s: %s", rt.method, rt.path, r.body)
		require.Equal(t, pigeon.CodeForbidden, r.code(t))
		want = append(want, rt.method+" "+rt.pattern)
		f.clock.Advance(2 * time.Second)
	}
	// Unauthenticated calls name no principal: 401, and no record.
	r := f.do(t, http.MethodGet, "/v1/audit", "", "")
	require.Equal(t, http.StatusUnauthorized, r.status)

	recs, err := f.e.Audit(context.Background(), 0, 0)
	require.NoError(t, err)
	var got []string
	for _, rec := range recs {
		if rec.Type != string(pigeon.EventAccessDenied) {
			continue
		}
		require.Equal(t, demo.Orders, rec.Principal)
		require.Equal(t, string(pigeon.OutcomeDeny), rec.Outcome)
		require.Equal(t, string(pigeon.CodeForbidden), rec.Code)
		got = append(got, rec.Ref)
	}
	require.Equal(t, want, got)
	_, err = f.e.VerifyAudit(context.Background())
	require.NoError(t, err)
}

// TestRoleRefusalsCoalesce: a principal probing privileged routes in a
// loop, a different one each time, adds one record and then one
// coalesced:N record a second, not one record a call.
func TestRoleRefusalsCoalesce(t *testing.T) {
	f := newFixture(t)
	paths := []string{"/v1/audit", "/v1/quarantine", "/v1/accounts", "/v1/roles"}
	for i := range 40 {
		r := f.do(t, http.MethodGet, paths[i%len(paths)], "orders-token", "")
		require.Equal(t, http.StatusForbidden, r.status)
	}
	denied := func() []pigeon.AuditRecord {
		recs, err := f.e.Audit(context.Background(), 0, 0)
		require.NoError(t, err)
		var out []pigeon.AuditRecord
		for _, rec := range recs {
			if rec.Type == string(pigeon.EventAccessDenied) {
				out = append(out, rec)
			}
		}
		return out
	}
	require.Len(t, denied(), 1, "within the second only the first is written")
	f.clock.Advance(2 * time.Second)
	recs := denied()
	require.Len(t, recs, 2)
	require.Equal(t, "GET /v1/audit", recs[0].Ref)
	require.Equal(t, "coalesced:39 (refs differ) last:GET /v1/roles", recs[1].Ref)
	require.Equal(t, demo.Orders, recs[1].Principal)
}
