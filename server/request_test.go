package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/server"
	"pigeon/transport/ws"
)

// POST /v1/requests answers with the reply a responder publishes, or 504
// REQUEST_TIMEOUT; a bad body is refused with its code before anything is
// published.
func TestRequestOverHTTP(t *testing.T) {
	f := newFixture(t)
	id := f.contract(t, "checkout-token", "payments.authorize")
	request := func(body string, headers ...string) response {
		return f.do(t, http.MethodPost, "/v1/requests", "checkout-token", body, append([]string{"x-pigeon-contract", id}, headers...)...)
	}

	t.Run("no responder", func(t *testing.T) {
		start := time.Now()
		r := request(`{"timeoutMs":200,"message":` + msgBody(t, demo.Payment("o-timeout")) + `}`)
		require.Equal(t, http.StatusGatewayTimeout, r.status, "%s", r.body)
		require.Equal(t, pigeon.CodeRequestTimeout, r.code(t))
		require.Less(t, time.Since(start), 20*time.Second, "the wait is bounded by timeoutMs, not the default")
	})

	bad := []struct {
		name, body string
		status     int
		code       pigeon.Code
	}{
		{"no body", "", http.StatusBadRequest, pigeon.CodeBadRequest},
		{"no message", `{"timeoutMs":100}`, http.StatusBadRequest, pigeon.CodeBadRequest},
		{"message not an object", `{"message":"hi"}`, http.StatusBadRequest, pigeon.CodeBadRequest},
		{"negative timeout", `{"timeoutMs":-1,"message":` + msgBody(t, demo.Payment("o-neg")) + `}`, http.StatusBadRequest, pigeon.CodeInvalidArgument},
		{"duplicate key", `{"message":{"subject":"payments.authorize","subject":"x"}}`, http.StatusBadRequest, pigeon.CodeDuplicateKey},
		{"timeout not a number", `{"timeoutMs":"soon","message":{}}`, http.StatusBadRequest, pigeon.CodeBadRequest},
		{"envelope invalid", `{"message":{"subject":"payments.authorize"}}`, http.StatusUnprocessableEntity, pigeon.CodeEnvelopeInvalid},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			r := request(c.body)
			require.Equal(t, c.status, r.status, "%s", r.body)
			require.Equal(t, c.code, r.code(t))
		})
	}
	t.Run("no contract", func(t *testing.T) {
		r := f.do(t, http.MethodPost, "/v1/requests", "checkout-token", `{"timeoutMs":100,"message":`+msgBody(t, demo.Payment("o-nc"))+`}`)
		require.Equal(t, http.StatusForbidden, r.status, "%s", r.body)
		require.Equal(t, pigeon.CodeContractRequired, r.code(t))
	})
	t.Run("denied by a gate", func(t *testing.T) {
		m := demo.Payment("o-pan")
		m.Data = json.RawMessage(`{"merchantId":"m-1","orderId":"o-pan","amount":1,"currency":"GBP","paymentToken":"tok","card":{"pan":"4111111111111111"}}`)
		r := request(`{"timeoutMs":100,"message":` + msgBody(t, m) + `}`)
		require.Equal(t, http.StatusUnprocessableEntity, r.status, "%s", r.body)
		require.Equal(t, pigeon.CodeSensitiveFieldDenied, r.code(t))
	})
	t.Run("wrong method", func(t *testing.T) {
		r := f.do(t, http.MethodGet, "/v1/requests", "checkout-token", "")
		require.Equal(t, http.StatusMethodNotAllowed, r.status)
		require.Equal(t, "POST", r.header.Get("Allow"))
	})

	t.Run("replied", func(t *testing.T) {
		ctx := context.Background()
		sub, err := f.e.Handle(ctx, "gateway-token", "payments.authorize", func(ctx context.Context, d *pigeon.Delivery) error {
			_, err := d.Session.Publish(ctx, demo.Approval(d.Message.ID))
			return err
		})
		require.NoError(t, err)
		defer sub.Unsubscribe(ctx)
		r := request(`{"timeoutMs":10000,"message":` + msgBody(t, demo.Payment("o-replied")) + `}`)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		body := r.json(t)
		require.Equal(t, "replied", body["status"])
		reply := body["message"].(map[string]any)
		require.Equal(t, demo.Gateway, reply["source"])
		require.Equal(t, "payment.authorization.result", reply["type"])
		require.NotEmpty(t, reply["correlationId"])
		require.Equal(t, map[string]any{"approved": true}, reply["data"])
	})
}

// POST /v1/requests counts toward the bound of its principal's requests
// waiting for replies (ws.Options.MaxRequestBytesPerPrincipal), shared
// with its WebSocket requests: each waits holding its message, and a
// principal's HTTP connections are as many as it likes. Beyond it a
// request is refused 429 RATE_LIMITED before it is published; once the
// waiting one is answered, the room is back. Before, HTTP requests were
// not counted at all.
func TestHTTPRequestsCountTowardThePrincipalsBound(t *testing.T) {
	e, err := pigeon.New(context.Background(), &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
		Catalog:       testCatalog(),
		Region:        "uk",
	})
	require.NoError(t, err)
	s, hs := serve(t, e, &server.Options{WebSocket: &ws.Options{MaxRequestBytesPerPrincipal: 1}}) // one request waiting
	f := &fixture{e: e, s: s, hs: hs}
	id := f.contract(t, "checkout-token", "payments.authorize")
	request := func(order string, timeoutMs int) response {
		return f.do(t, http.MethodPost, "/v1/requests", "checkout-token",
			`{"timeoutMs":`+strconv.Itoa(timeoutMs)+`,"message":`+msgBody(t, demo.Payment(order))+`}`, "x-pigeon-contract", id)
	}
	ctx := context.Background()
	got, goOn := make(chan string, 4), make(chan struct{})
	var release sync.Once
	goOnce := func() { release.Do(func() { close(goOn) }) }
	sub, err := e.Handle(ctx, "gateway-token", "payments.authorize", func(ctx context.Context, d *pigeon.Delivery) error {
		got <- d.Message.ID
		<-goOn
		_, err := d.Session.Publish(ctx, demo.Approval(d.Message.ID))
		return err
	})
	require.NoError(t, err)
	defer sub.Unsubscribe(ctx)
	defer goOnce() // first: a failed assertion must not leave the handler waiting

	first := make(chan response, 1)
	go func() { first <- request("o-1", 20000) }()
	<-got // the first request waits for its reply

	r := request("o-2", 100)
	require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r.body)
	require.Equal(t, pigeon.CodeRateLimited, r.code(t))
	require.Contains(t, string(r.body), "MaxRequestBytesPerPrincipal")

	goOnce()
	require.Equal(t, http.StatusOK, (<-first).status)
	r = request("o-3", 10000)
	require.Equal(t, http.StatusOK, r.status, "the room is back: %s", r.body)
	require.Len(t, got, 1, "o-2 was never published: only o-3 came after o-1")
}
