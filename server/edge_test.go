package server_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/internal/wire"
)

// message is the error message of an error body.
func (r response) message(t *testing.T) string {
	t.Helper()
	e, ok := r.json(t)["error"].(map[string]any)
	require.True(t, ok, "not an error body: %s", r.body)
	return e["message"].(string)
}

// Ambiguous JSON (a member name twice, bytes that are not UTF-8, a lone
// surrogate escape, a member name in another case than its field's) is
// refused at the edge on every route that reads a
// body, before anything decodes or stores it.
func TestAmbiguousJSONRefused(t *testing.T) {
	f := newFixture(t)
	checkout := f.contract(t, "checkout-token", "payments.authorize")
	gateway := f.contract(t, "gateway-token", "payments.authorize")
	notifier := f.contract(t, "notifier-token", "notifications.send")
	replayer := f.contract(t, "notify-replay-token", "notifications.send")
	payment := func(data string) string {
		return `{"type":"payment.authorization.requested","subject":"payments.authorize","intent":"authorize_payment",` +
			`"idempotencyKey":"pay-` + fmt.Sprint(time.Now().UnixNano()) + `","classification":"pci","data":` + data + `}`
	}
	withContract := func(id string) []string { return []string{"x-pigeon-contract", id} }

	tests := []struct {
		name, method, path, token, body string
		headers                         []string
		code                            pigeon.Code
	}{
		// The probes, on publish.
		{"publish paymentToken twice", "POST", "/v1/messages", "checkout-token",
			payment(`{"paymentToken":"4111111111111111","merchantId":"m-1","orderId":"o-1","amount":42.5,"currency":"GBP","paymentToken":"tok_abc"}`),
			withContract(checkout), pigeon.CodeDuplicateKey},
		{"publish amount twice", "POST", "/v1/messages", "checkout-token",
			payment(`{"merchantId":"m-1","orderId":"o-2","amount":"x","currency":"GBP","paymentToken":"tok_abc","amount":42.5}`),
			withContract(checkout), pigeon.CodeDuplicateKey},
		{"publish raw 0xff", "POST", "/v1/messages", "checkout-token",
			payment(`{"merchantId":"m-1` + "\xff" + `","orderId":"o-3","amount":42.5,"currency":"GBP","paymentToken":"tok_abc"}`),
			withContract(checkout), pigeon.CodeInvalidUTF8},
		{"publish lone surrogate", "POST", "/v1/messages", "checkout-token",
			payment(`{"merchantId":"m-1\ud800","orderId":"o-4","amount":42.5,"currency":"GBP","paymentToken":"tok_abc"}`),
			withContract(checkout), pigeon.CodeInvalidUTF8},

		// Every other body the server reads.
		{"negotiate subjects twice", "POST", "/v1/contracts", "checkout-token", `{"subjects":["orders.events"],"subjects":["payments.authorize"]}`, nil, pigeon.CodeDuplicateKey},
		{"negotiate raw 0xff", "POST", "/v1/contracts", "checkout-token", "{\"subjects\":[\"payments.authorize\xff\"]}", nil, pigeon.CodeInvalidUTF8},
		{"negotiate lone surrogate", "POST", "/v1/contracts", "checkout-token", `{"subjects":["payments.authorize\ud800"]}`, nil, pigeon.CodeInvalidUTF8},
		{"receive max twice", "POST", "/v1/subjects/payments.authorize/receive", "gateway-token", `{"max":1,"max":2}`, withContract(gateway), pigeon.CodeDuplicateKey},
		{"receive lone surrogate", "POST", "/v1/subjects/payments.authorize/receive", "gateway-token", `{"contractId":"\udc00"}`, withContract(gateway), pigeon.CodeInvalidUTF8},
		{"ack messageId twice", "POST", "/v1/subjects/notifications.send/ack", "notifier-token", `{"messageId":"a","messageId":"b"}`, withContract(notifier), pigeon.CodeDuplicateKey},
		{"nack delayMs twice", "POST", "/v1/subjects/notifications.send/nack", "notifier-token", `{"messageId":"a","delayMs":1,"delayMs":2}`, withContract(notifier), pigeon.CodeDuplicateKey},
		{"replay reason twice", "POST", "/v1/subjects/notifications.send/replay", "notify-replay-token", `{"reason":"a","reason":"b"}`, withContract(replayer), pigeon.CodeDuplicateKey},
		{"replay raw 0xff", "POST", "/v1/subjects/notifications.send/replay", "notify-replay-token", "{\"reason\":\"\xff\"}", withContract(replayer), pigeon.CodeInvalidUTF8},
		{"release contractId twice", "POST", "/v1/quarantine/qr_x/release", "checkout-auditor-token", `{"contractId":"a","contractId":"b"}`, nil, pigeon.CodeDuplicateKey},
		{"account id twice", "POST", "/v1/accounts", "admin-token", `{"id":"a","id":"b"}`, nil, pigeon.CodeDuplicateKey},
		{"account raw 0xff", "POST", "/v1/accounts", "admin-token", "{\"id\":\"a\xff\"}", nil, pigeon.CodeInvalidUTF8},
		{"role permissions twice", "PUT", "/v1/roles/r", "admin-token", `{"permissions":[],"permissions":[{"subject":"payments.authorize","operations":["publish"]}]}`, nil, pigeon.CodeDuplicateKey},
		{"grant ttlMs twice", "POST", "/v1/grants", "admin-token", `{"account":"a","roles":["r"],"ttlMs":1,"ttlMs":2}`, nil, pigeon.CodeDuplicateKey},
		{"keys twice", "PUT", "/v1/accounts/a/keys", "admin-token", `{"keys":[],"keys":[]}`, nil, pigeon.CodeDuplicateKey},

		// A member spelled in another case than its field: encoding/json
		// would take it for the field, a JavaScript or Python reader not.
		{"publish Data", "POST", "/v1/messages", "checkout-token",
			strings.Replace(payment(`{"merchantId":"m-1","orderId":"o-5","amount":42.5,"currency":"GBP","paymentToken":"tok_abc"}`), `"data":`, `"data":{},"Data":`, 1),
			withContract(checkout), pigeon.CodeEnvelopeInvalid},
		{"publish Subject", "POST", "/v1/messages", "checkout-token", `{"Subject":"payments.authorize"}`, withContract(checkout), pigeon.CodeEnvelopeInvalid},
		{"negotiate Subjects", "POST", "/v1/contracts", "checkout-token", `{"Subjects":["payments.authorize"]}`, nil, pigeon.CodeBadRequest},
		{"receive MAX", "POST", "/v1/subjects/payments.authorize/receive", "gateway-token", `{"MAX":1}`, withContract(gateway), pigeon.CodeBadRequest},
		{"role permission Subject", "PUT", "/v1/roles/r", "admin-token", `{"permissions":[{"Subject":"payments.authorize","operations":["publish"]}]}`, nil, pigeon.CodeBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := f.do(t, tc.method, tc.path, tc.token, tc.body, tc.headers...)
			require.Equal(t, wire.HTTPStatus(tc.code), r.status, "body %s", r.body)
			require.Equal(t, tc.code, r.code(t))
			require.NotContains(t, string(r.body), "4111111111111111", "a refusal never quotes a value")
		})
	}

	// Nothing was stored: the receiver sees nothing, the quarantine is
	// untouched, and no contract or account came of it.
	r := f.do(t, http.MethodPost, "/v1/subjects/payments.authorize/receive", "gateway-token", `{}`, withContract(gateway)...)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Empty(t, r.json(t)["messages"])
	r = f.do(t, http.MethodGet, "/v1/quarantine", "auditor-token", "")
	require.Equal(t, http.StatusOK, r.status)
	require.Empty(t, r.json(t)["records"])
	r = f.do(t, http.MethodGet, "/v1/accounts/a", "admin-token", "")
	require.Equal(t, http.StatusNotFound, r.status)
}

// A body nested deeper than the edge allows is refused as what it is, not
// as "not JSON" or a field of the wrong type.
func TestOverDeepBodyNamesTheNesting(t *testing.T) {
	f := newFixture(t)
	notifier := f.contract(t, "notifier-token", "notifications.send")
	deep := `{"max":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`
	r := f.do(t, http.MethodPost, "/v1/subjects/notifications.send/receive", "notifier-token", deep, "x-pigeon-contract", notifier)
	require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
	require.Equal(t, pigeon.CodeBadRequest, r.code(t))
	require.Contains(t, r.message(t), "nesting deeper than")
	r = f.do(t, http.MethodPost, "/v1/contracts", "checkout-token", `{"subjects":`+strings.Repeat("[", 20000)+strings.Repeat("]", 20000)+`}`)
	require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
	require.Contains(t, r.message(t), "nesting deeper than")
}

// A path that is not in canonical form gets the usual JSON error, never a
// redirect to another route and never HTML.
func TestUncleanPathsAnswerJSON(t *testing.T) {
	f := newFixture(t)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	tests := []struct{ method, path string }{
		{"GET", "//v1/subjects"},
		{"GET", "/v1/../v1/subjects"},
		{"GET", "/v1/./subjects"},
		{"GET", "/v1/subjects/"},
		{"GET", "/v1/subjects//payments.authorize"},
		{"GET", "/health/"},
		{"POST", "//v1/contracts"},
		{"POST", "/v1/contracts/"},
		{"POST", "/v1/subjects/payments.authorize/../notifications.send/receive"},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, f.hs.URL+tc.path, strings.NewReader(`{"subjects":["payments.authorize"]}`))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer checkout-token")
			resp, err := noRedirect.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			r := response{status: resp.StatusCode, header: resp.Header, body: b}
			require.Equal(t, http.StatusNotFound, r.status, "body %s", b)
			require.Empty(t, r.header.Get("Location"))
			require.Equal(t, "application/json", r.header.Get("Content-Type"))
			require.Equal(t, pigeon.CodeNotFound, r.code(t))
		})
	}
}

// A request that says who, where or under which contract twice is refused
// 400 BAD_REQUEST before anything is resolved or done: a proxy in front
// could act on one value and the broker on the other.
func TestRepeatedIdentityHeadersRefused(t *testing.T) {
	f := newFixture(t)
	c := f.contract(t, "checkout-token", "payments.authorize")
	tests := []struct {
		name   string
		header http.Header
	}{
		{"Authorization twice", http.Header{"Authorization": {"Bearer checkout-token", "Bearer admin-token"}}},
		{"Authorization twice, the same", http.Header{"Authorization": {"Bearer checkout-token", "Bearer checkout-token"}}},
		{"region twice", http.Header{"Authorization": {"Bearer checkout-token"}, "X-Pigeon-Region": {"uk", "us"}}},
		{"contract twice", http.Header{"Authorization": {"Bearer checkout-token"}, "X-Pigeon-Contract": {c, c}}},
	}
	body := `{"type":"payment.authorization.requested","subject":"payments.authorize","intent":"authorize_payment",` +
		`"idempotencyKey":"twice","classification":"pci","data":{"merchantId":"m-1","orderId":"o-1","amount":1,"currency":"GBP","paymentToken":"tok_a"}}`
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, f.hs.URL+"/v1/messages", strings.NewReader(body))
			require.NoError(t, err)
			req.Header = tc.header.Clone()
			if req.Header.Get("X-Pigeon-Contract") == "" {
				req.Header.Set("X-Pigeon-Contract", c)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			r := response{status: resp.StatusCode, header: resp.Header, body: b}
			require.Equal(t, http.StatusBadRequest, r.status, "%s", b)
			require.Equal(t, pigeon.CodeBadRequest, r.code(t))
		})
	}
	r := f.do(t, http.MethodPost, "/v1/messages", "checkout-token", body, "x-pigeon-contract", c)
	require.Equal(t, http.StatusAccepted, r.status, "said once, the same request is taken: %s", r.body)
}

// An HTTP receive settles what it returns unless the request asks for
// explicit acks, so a pull consumer written for the reference broker (which
// cannot ack) does not get every message again after the ack wait.
func TestReceiveAcksUnlessExplicit(t *testing.T) {
	tests := []struct {
		name, subject, publisher, receiver string
		msg                                func() *pigeon.Message
		ack                                string // the request's "ack", "" for none
		redelivered                        bool
	}{
		{"work queue, default", "notifications.send", "orders-token", "notifier-token", func() *pigeon.Message { return demo.Notification("n-1") }, "", false},
		{"work queue, auto", "notifications.send", "orders-token", "notifier-token", func() *pigeon.Message { return demo.Notification("n-1") }, "auto", false},
		{"work queue, explicit", "notifications.send", "orders-token", "notifier-token", func() *pigeon.Message { return demo.Notification("n-1") }, "explicit", true},
		{"request/reply, default", "payments.authorize", "checkout-token", "gateway-token", func() *pigeon.Message { return demo.Payment("o-1") }, "", false},
		{"request/reply, explicit", "payments.authorize", "checkout-token", "gateway-token", func() *pigeon.Message { return demo.Payment("o-1") }, "explicit", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			pub := f.contract(t, tc.publisher, tc.subject)
			sub := f.contract(t, tc.receiver, tc.subject)
			r := f.do(t, http.MethodPost, "/v1/messages", tc.publisher, msgBody(t, tc.msg()), "x-pigeon-contract", pub)
			require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
			id := r.json(t)["message"].(map[string]any)["id"].(string)

			body := `{}`
			if tc.ack != "" {
				body = `{"ack":"` + tc.ack + `"}`
			}
			receiveIDs := func() []string {
				r := f.do(t, http.MethodPost, "/v1/subjects/"+tc.subject+"/receive", tc.receiver, body, "x-pigeon-contract", sub)
				require.Equal(t, http.StatusOK, r.status, "%s", r.body)
				var ids []string
				for _, m := range r.json(t)["messages"].([]any) {
					ids = append(ids, m.(map[string]any)["id"].(string))
				}
				return ids
			}
			require.Equal(t, []string{id}, receiveIDs())
			// The lease (the subject's ack wait, 30 s) runs out.
			f.clock.Advance(pigeon.DefaultAckWait + time.Second)
			if tc.redelivered {
				require.Equal(t, []string{id}, receiveIDs(), "an unacked explicit receive comes back")
			} else {
				require.Empty(t, receiveIDs(), "a received message is done for this consumer")
			}
		})
	}
}

func TestReceiveAckModeIsValidated(t *testing.T) {
	f := newFixture(t)
	sub := f.contract(t, "notifier-token", "notifications.send")
	for _, body := range []string{`{"ack":"sometimes"}`, `{"ack":"AUTO"}`, `{"ack":true}`} {
		r := f.do(t, http.MethodPost, "/v1/subjects/notifications.send/receive", "notifier-token", body, "x-pigeon-contract", sub)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", body, r.body)
		require.Equal(t, pigeon.CodeBadRequest, r.code(t))
	}
}

// Every JSON answer, success or error, ends with a newline.
func TestJSONBodiesEndWithNewline(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name, method, path, token, body string
		status                          int
	}{
		{"health", "GET", "/health", "", "", 200},
		{"subjects", "GET", "/v1/subjects", "", "", 200},
		{"negotiate", "POST", "/v1/contracts", "checkout-token", `{"subjects":["payments.authorize"]}`, 201},
		{"not JSON", "POST", "/v1/contracts", "checkout-token", `subjects=x`, 400},
		{"no credential", "POST", "/v1/contracts", "", `{}`, 401},
		{"not found", "GET", "/nope", "", "", 404},
		{"wrong method", "DELETE", "/health", "", "", 405},
		{"unclean path", "GET", "//health", "", "", 404},
		{"ws without credential", "GET", "/v1/ws", "", "", 401},
		{"ws without upgrade", "GET", "/v1/ws", "checkout-token", "", 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := f.do(t, tc.method, tc.path, tc.token, tc.body)
			require.Equal(t, tc.status, r.status, "%s", r.body)
			require.True(t, strings.HasSuffix(string(r.body), "}\n"), "%q", r.body)
			require.Equal(t, 1, strings.Count(string(r.body), "\n"), "%q", r.body)
		})
	}
}

// TestMillisecondFieldsDoNotWrap: a ttlMs or delayMs whose Duration would
// overflow is refused, never wrapped to a default or a tiny value.
func TestMillisecondFieldsDoNotWrap(t *testing.T) {
	f := newFixture(t)
	for _, ms := range []string{"9223372036855", "9223372036854775807", "-1"} {
		r := f.do(t, "POST", "/v1/contracts", "checkout-token", `{"subjects":["payments.authorize"],"ttlMs":`+ms+`}`)
		require.Equal(t, 400, r.status, "ttlMs %s: %s", ms, r.body)
		require.Equal(t, pigeon.CodeInvalidArgument, r.code(t))
		r = f.do(t, "POST", "/v1/grants", "admin-token", `{"account":"checkout-api","ttlMs":`+ms+`}`)
		require.Equal(t, 400, r.status, "grant ttlMs %s: %s", ms, r.body)
		c := f.contract(t, "gateway-token", "payments.authorize")
		r = f.do(t, "POST", "/v1/subjects/payments.authorize/nack", "gateway-token", `{"messageId":"m","contractId":"`+c+`","delayMs":`+ms+`}`)
		require.Equal(t, 400, r.status, "delayMs %s: %s", ms, r.body)
	}
	// A nack's delay is bounded (pigeon.MaxRetryDelay, 12 hours) even
	// where it would fit a Duration.
	c := f.contract(t, "gateway-token", "payments.authorize")
	r := f.do(t, "POST", "/v1/subjects/payments.authorize/nack", "gateway-token", `{"messageId":"m","contractId":"`+c+`","delayMs":43200001}`)
	require.Equal(t, 400, r.status, "%s", r.body)
	require.Equal(t, pigeon.CodeInvalidArgument, r.code(t))
}

// TestCallerRegionCheckedAtTheEdge: the region a request names
// (X-Pigeon-Region), which becomes the region of a message that names
// none, is refused at the edge when no message could carry it: longer than
// an envelope field may be, or not UTF-8.
func TestCallerRegionCheckedAtTheEdge(t *testing.T) {
	f := newFixture(t)
	c := f.contract(t, "checkout-token", "payments.authorize")
	body := `{"type":"payment.authorization.requested","subject":"payments.authorize","intent":"authorize_payment",` +
		`"idempotencyKey":"region","classification":"pci","data":{"merchantId":"m-1","orderId":"o-1","amount":1,"currency":"GBP","paymentToken":"tok_a"}}`
	for _, tc := range []struct {
		name, region string
		code         pigeon.Code
	}{
		{"too long", strings.Repeat("r", pigeon.MaxEnvelopeField+1), pigeon.CodeBadRequest},
		{"not UTF-8", "u\xffk", pigeon.CodeInvalidUTF8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := f.do(t, http.MethodPost, "/v1/messages", "checkout-token", body, "x-pigeon-contract", c, "x-pigeon-region", tc.region)
			require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
			require.Equal(t, tc.code, r.code(t))
		})
	}
	r := f.do(t, http.MethodPost, "/v1/messages", "checkout-token", body, "x-pigeon-contract", c, "x-pigeon-region", "uk")
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
}
