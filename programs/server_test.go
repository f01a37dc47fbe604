package programs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/server"
)

// serve starts the HTTP server of f with its programs on 127.0.0.1.
func (f *fixture) serve(t *testing.T) string {
	t.Helper()
	s := server.New(f.e, &server.Options{Programs: f.mg})
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		hs.Close()
	})
	return hs.URL
}

// call sends one request and returns the status and decoded body.
func call(t *testing.T, method, url, token string, body any, headers ...string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

func errCode(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// Deploy, deliver, republish and reply end to end through the server.
func TestProgramsOverHTTP(t *testing.T) {
	f := newFixture(t, nil)
	base := f.serve(t)
	enricher := map[string]any{
		"manifest": map[string]any{"route": map[string]any{"subject": "orders.in"}, "account": progAcc, "publishes": []string{"orders.out"},
			"env": map[string]string{"ENRICH_FIELD": "via", "ENRICH_VALUE": "http", "ENRICH_TO": "orders.out"}},
		"module": example(t, "enricher"),
	}
	st, body := call(t, http.MethodPut, base+"/v1/programs/enricher", "client-token", enricher)
	require.Equal(t, http.StatusForbidden, st, "a client may not deploy")
	require.Equal(t, "FORBIDDEN", errCode(body))
	asOther := map[string]any{"manifest": map[string]any{"route": map[string]any{"subject": "orders.in"}, "account": other}, "module": modOK}
	st, _ = call(t, http.MethodPut, base+"/v1/programs/x", "deployer-token", asOther)
	require.Equal(t, http.StatusForbidden, st, "the programs role deploys only as its own account")

	st, body = call(t, http.MethodPut, base+"/v1/programs/enricher", "admin-token", enricher)
	require.Equal(t, http.StatusCreated, st, "%v", body)
	require.EqualValues(t, 1, body["program"].(map[string]any)["version"])

	out := f.collect(t, "orders.out")
	st, body = call(t, http.MethodPost, base+"/v1/contracts", "client-token", map[string]any{"subjects": []string{"orders.in", "quotes"}})
	require.Equal(t, http.StatusCreated, st, "%v", body)
	contract := body["contract"].(map[string]any)["id"].(string)
	st, body = call(t, http.MethodPost, base+"/v1/messages", "client-token",
		map[string]any{"type": "order", "subject": "orders.in", "intent": "record", "classification": "internal", "data": map[string]any{"order": "o-9"}},
		"X-Pigeon-Contract", contract)
	require.Equal(t, http.StatusAccepted, st, "%v", body)
	require.JSONEq(t, `{"order":"o-9","via":"http"}`, string(next(t, out).Data))

	responder := map[string]any{"manifest": map[string]any{"route": map[string]any{"subject": "quotes"}, "account": progAcc, "env": map[string]string{"PRICE": "5"}},
		"module": example(t, "responder")}
	st, body = call(t, http.MethodPut, base+"/v1/programs/quotes", "deployer-token", responder)
	require.Equal(t, http.StatusCreated, st, "%v", body)
	st, body = call(t, http.MethodPost, base+"/v1/requests", "client-token",
		map[string]any{"message": map[string]any{"type": "quote", "subject": "quotes", "intent": "record", "classification": "internal", "data": map[string]any{"item": "bolt", "qty": 2}}},
		"X-Pigeon-Contract", contract)
	require.Equal(t, http.StatusOK, st, "%v", body)
	require.Equal(t, map[string]any{"item": "bolt", "qty": 2.0, "price": 10.0}, body["message"].(map[string]any)["data"])

	st, body = call(t, http.MethodPut, base+"/v1/programs/bad", "admin-token", map[string]any{"manifest": asOther["manifest"], "module": []byte("junk")})
	require.Equal(t, http.StatusUnprocessableEntity, st)
	require.Equal(t, "PROGRAM_INVALID", errCode(body))
	require.Equal(t, "magic", body["error"].(map[string]any)["details"].(map[string]any)["check"])

	st, body = call(t, http.MethodGet, base+"/v1/programs", "deployer-token", nil)
	require.Equal(t, http.StatusOK, st)
	require.Len(t, body["programs"], 2)
	st, body = call(t, http.MethodGet, base+"/v1/programs/quotes", "admin-token", nil)
	require.Equal(t, http.StatusOK, st)
	require.Equal(t, true, body["program"].(map[string]any)["bound"])
	st, _ = call(t, http.MethodDelete, base+"/v1/programs/enricher", "deployer-token", nil)
	require.Equal(t, http.StatusOK, st, "the enricher runs as the deployer's account")
	st, body = call(t, http.MethodGet, base+"/v1/programs/enricher", "admin-token", nil)
	require.Equal(t, http.StatusNotFound, st)
	require.Equal(t, string(pigeon.CodeProgramNotFound), errCode(body))
}
