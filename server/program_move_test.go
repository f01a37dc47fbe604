package server_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// envDeployBody is a PUT /v1/programs/{name} body running as account on
// jobs.in with env.
func envDeployBody(t *testing.T, account string, env map[string]string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"manifest": map[string]any{"route": map[string]any{"subject": "jobs.in"}, "account": account, "env": env},
		"module":   modNoop,
	})
	require.NoError(t, err)
	return string(b)
}

// historyVersions is the versions listed in a program's history.
func historyVersions(t *testing.T, p map[string]any) []int {
	t.Helper()
	out := []int{}
	h, _ := p["history"].([]any)
	for _, r := range h {
		out = append(out, int(r.(map[string]any)["version"].(float64)))
	}
	return out
}

// TestMovedProgramHidesThePreviousAccountsVersions: after an admin moves
// a program to another account, the new account may read and change the
// program, but the versions from before the move are the previous
// account's: their manifests (its env) and who deployed them. Before,
// every route that shows a program (GET one, the list, a deploy's and a
// rollback's answer) showed the new account the whole history. An admin
// still sees every version: it needs them to roll back.
func TestMovedProgramHidesThePreviousAccountsVersions(t *testing.T) {
	_, _, hs := programsServer(t)
	const secret = "b-config-hunter2"
	put := func(token, account string, env map[string]string) response {
		return doRequest(t, http.MethodPut, hs.URL+"/v1/programs/billing", token, envDeployBody(t, account, env))
	}
	r := put("b-token", progB, map[string]string{"B_CONFIG": secret})
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	r = put("b-token", progB, map[string]string{"B_CONFIG": secret + "-2"})
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	// The admin moves it to svc-a (version 3).
	r = put("admin-token", progA, map[string]string{"A_CONFIG": "a"})
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)

	// requireOwn: what svc-a is shown lists only its own versions, and
	// nothing of svc-b's.
	requireOwn := func(what string, r response, p func(map[string]any) map[string]any, want []int) {
		t.Helper()
		require.Equal(t, http.StatusOK, r.status, "%s: %s", what, r.body)
		require.NotContains(t, string(r.body), secret, what)
		require.NotContains(t, string(r.body), progB, what)
		require.Equal(t, want, historyVersions(t, p(r.json(t))), what)
	}
	one := func(v map[string]any) map[string]any { return v["program"].(map[string]any) }
	first := func(v map[string]any) map[string]any { return v["programs"].([]any)[0].(map[string]any) }

	requireOwn("GET one", doRequest(t, http.MethodGet, hs.URL+"/v1/programs/billing", "a-token", ""), one, []int{})
	requireOwn("GET list", doRequest(t, http.MethodGet, hs.URL+"/v1/programs", "a-token", ""), first, []int{})
	requireOwn("deploy", put("a-token", progA, map[string]string{"A_CONFIG": "a2"}), one, []int{3})
	requireOwn("rollback", doRequest(t, http.MethodPost, hs.URL+"/v1/programs/billing/rollback", "a-token", `{"version":3}`), one, []int{3, 4})
	requireOwn("GET one after", doRequest(t, http.MethodGet, hs.URL+"/v1/programs/billing", "a-token", ""), one, []int{3, 4})

	// The admin sees every version, svc-b's manifests included.
	r = doRequest(t, http.MethodGet, hs.URL+"/v1/programs/billing", "admin-token", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Contains(t, string(r.body), secret)
	require.Equal(t, []int{1, 2, 3, 4}, historyVersions(t, one(r.json(t))))

	// svc-a cannot roll back to a version of svc-b's either, nor learn
	// that it is one: it is a version svc-a has not got.
	r = doRequest(t, http.MethodPost, hs.URL+"/v1/programs/billing/rollback", "a-token", `{"version":1}`)
	require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)
	require.Equal(t, pigeon.CodeProgramNotFound, r.code(t))
}
