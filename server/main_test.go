package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/internal/leakcheck"
	"pigeon/internal/testclock"
	"pigeon/server"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// Principals beyond the demo ones.
const alice = "spiffe://test/alice"

// fixture is a server on the demo catalog plus two test subjects, started
// on 127.0.0.1.
type fixture struct {
	e     *pigeon.Engine
	s     *server.Server
	hs    *httptest.Server
	clock *testclock.Clock
	feed  *server.Feed // the console's, observing e
}

func testCatalog() *pigeon.Catalog {
	cat := demo.Catalog()
	cat.Schemas["order.event.v1"] = []byte(`{"type":"object","required":["orderId"],"properties":{"orderId":{"type":"string"}}}`)
	cat.Subjects = append(cat.Subjects,
		pigeon.SubjectPolicy{
			Name: "orders.events", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"record"},
			Schema:     &pigeon.SchemaRef{Name: "order.event.v1"},
			Quarantine: pigeon.QuarantinePolicy{OnSchemaViolation: true},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{
				pigeon.OpPublish: {{Effect: "allow", Principals: []string{demo.Checkout}}},
			},
		},
		pigeon.SubjectPolicy{
			Name: "limited.events", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"record"},
			RateLimit: &pigeon.RateLimitPolicy{PerSecond: 0.001, Burst: 1},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{
				pigeon.OpPublish: {{Effect: "allow", Principals: []string{alice}}},
			},
		},
	)
	return cat
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	clk := testclock.New(time.Now())
	tokens := append(demo.Tokens(),
		pigeon.StaticToken{Token: "alice-token", Principal: alice},
		pigeon.StaticToken{Token: "checkout-auditor-token", Principal: demo.Checkout, Roles: []string{"auditor"}},
	)
	feed := server.NewFeed(0)
	e, err := pigeon.New(context.Background(), &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(tokens...),
		Catalog:       testCatalog(),
		Region:        "uk",
		Now:           clk.Now,
		Observer:      feed,
	})
	require.NoError(t, err)
	s, hs := serve(t, e, &server.Options{Feed: feed})
	return &fixture{e: e, s: s, hs: hs, clock: clk, feed: feed}
}

// serve starts the server of e with opts on 127.0.0.1; the server and
// then e are shut down when the test ends.
func serve(t *testing.T, e *pigeon.Engine, opts *server.Options) (*server.Server, *httptest.Server) {
	t.Helper()
	s := server.New(e, opts)
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, s.Shutdown(ctx))
		hs.Close()
		require.NoError(t, e.Shutdown(ctx))
	})
	return s, hs
}

// response is one HTTP answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal(r.body, &v), "body %s", r.body)
	return v
}

// code is the error code of an error body.
func (r response) code(t *testing.T) pigeon.Code {
	t.Helper()
	var v struct {
		Error struct {
			Code    pigeon.Code    `json:"code"`
			Message string         `json:"message"`
			Details map[string]any `json:"details"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(r.body, &v), "body %s", r.body)
	require.NotEmpty(t, v.Error.Code, "not an error body: %s", r.body)
	require.NotNil(t, v.Error.Details, "details is always an object")
	return v.Error.Code
}

// do sends one request. headers alternate name, value.
func (f *fixture) do(t *testing.T, method, path, token, body string, headers ...string) response {
	t.Helper()
	return doRequest(t, method, f.hs.URL+path, token, body, headers...)
}

// doRequest sends one request to url.
func doRequest(t *testing.T, method, url, token, body string, headers ...string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// contract negotiates over HTTP and returns the contract id.
func (f *fixture) contract(t *testing.T, token string, subjects ...string) string {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"subjects": subjects})
	r := f.do(t, http.MethodPost, "/v1/contracts", token, string(b))
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	return r.json(t)["contract"].(map[string]any)["id"].(string)
}

func msgBody(t *testing.T, m *pigeon.Message) string {
	t.Helper()
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return string(b)
}
