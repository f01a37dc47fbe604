package server_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
	"pigeon/store/memory"
)

// TestPurgeSubjectMessages: DELETE /v1/subjects/{name}/messages removes
// the messages of a subject the catalog does not have (an admin's call:
// 401 without a credential, 403 FORBIDDEN without the role), answers 200
// with how many went, 0 once none are left, and refuses a subject of the
// catalog with 409 CONFLICT. Each refusal of an authenticated caller is
// in the audit log: the route's for want of the role as access.denied
// naming the route, the engine's as purge.denied naming the subject.
func TestPurgeSubjectMessages(t *testing.T) {
	st := memory.New(nil)
	e, err := pigeon.New(context.Background(), &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
		Catalog:       testCatalog(),
		Region:        "uk",
		Store:         st,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close(context.Background())) }) // after the engine's shutdown
	_, hs := serve(t, e, nil)
	// Messages of a subject no longer in the policy, as a broker that
	// served it left them.
	for _, id := range []string{"msg_1", "msg_2"} {
		_, _, err := st.Append(context.Background(), store.Message{Subject: "retired.events", ID: id, Time: time.Now(), Body: []byte("{}")})
		require.NoError(t, err)
	}
	const path = "/v1/subjects/retired.events/messages"
	purge := func(path, token string) response {
		t.Helper()
		return doRequest(t, http.MethodDelete, hs.URL+path, token, "")
	}

	require.Equal(t, http.StatusUnauthorized, purge(path, "").status)
	for _, token := range []string{"auditor-token", "orders-token"} {
		r := purge(path, token)
		require.Equal(t, http.StatusForbidden, r.status, "%s: %s", token, r.body)
		require.Equal(t, pigeon.CodeForbidden, r.code(t))
	}
	r := purge("/v1/subjects/notifications.send/messages", "admin-token")
	require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
	require.Equal(t, pigeon.CodeConflict, r.code(t))
	type denial struct{ event, principal, subject, ref, code string }
	var denied []denial
	recs, err := e.Audit(context.Background(), 0, 0)
	require.NoError(t, err)
	for _, rec := range recs {
		if rec.Type == string(pigeon.EventPurgeDenied) || rec.Type == string(pigeon.EventAccessDenied) {
			require.Equal(t, string(pigeon.OutcomeDeny), rec.Outcome)
			denied = append(denied, denial{rec.Type, rec.Principal, rec.Subject, rec.Ref, rec.Code})
		}
	}
	route := "DELETE /v1/subjects/{name}/messages"
	require.Equal(t, []denial{
		{string(pigeon.EventAccessDenied), demo.Auditor, "", route, string(pigeon.CodeForbidden)},
		{string(pigeon.EventAccessDenied), demo.Orders, "", route, string(pigeon.CodeForbidden)},
		{string(pigeon.EventPurgeDenied), demo.Administrator, "notifications.send", "", string(pigeon.CodeConflict)},
	}, denied, "every refusal of a caller it knows is audited")
	r = doRequest(t, http.MethodGet, hs.URL+path, "admin-token", "")
	require.Equal(t, http.StatusMethodNotAllowed, r.status)
	require.Equal(t, http.MethodDelete, r.header.Get("Allow"))
	first, last, err := st.Bounds(context.Background(), "retired.events")
	require.NoError(t, err)
	require.Equal(t, [2]uint64{1, 2}, [2]uint64{first, last}, "nothing purged yet")

	r = purge(path, "admin-token")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.JSONEq(t, `{"purged":2}`, string(r.body))
	r = purge(path, "admin-token")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.JSONEq(t, `{"purged":0}`, string(r.body), "nothing left")
	first, last, err = st.Bounds(context.Background(), "retired.events")
	require.NoError(t, err)
	require.Greater(t, first, last, "every message gone")
}
