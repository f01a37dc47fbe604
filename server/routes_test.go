package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/internal/wire"
	"pigeon/server"
)

func TestHealthIsByteForByte(t *testing.T) {
	f := newFixture(t)
	r := f.do(t, http.MethodGet, "/health", "", "")
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, `{"ok":true,"service":"pigeon"}`+"\n", string(r.body))
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
}

func TestSubjects(t *testing.T) {
	f := newFixture(t)
	r := f.do(t, http.MethodGet, "/v1/subjects", "", "")
	require.Equal(t, http.StatusOK, r.status)
	var list struct{ Subjects []map[string]any }
	require.NoError(t, json.Unmarshal(r.body, &list))
	require.Len(t, list.Subjects, 4)
	byName := map[string]string{}
	for _, s := range list.Subjects {
		b, _ := json.Marshal(s)
		byName[s["name"].(string)] = string(b)
	}
	require.JSONEq(t, `{"name":"payments.authorize","mode":"requestReply","intents":["authorize_payment"],"classification":"pci","regions":["uk","eu"],"idempotencyRequired":true,"replayAllowed":false}`, byName["payments.authorize"])
	require.JSONEq(t, `{"name":"notifications.send","mode":"workQueue","intents":["send_notification"],"classification":"pii","regions":["uk","eu"],"idempotencyRequired":true,"replayAllowed":true}`, byName["notifications.send"])

	r = f.do(t, http.MethodGet, "/v1/subjects/payments.authorize", "", "")
	require.Equal(t, http.StatusOK, r.status)
	var one struct{ Subject map[string]any }
	require.NoError(t, json.Unmarshal(r.body, &one))
	b, _ := json.Marshal(one.Subject)
	require.JSONEq(t, byName["payments.authorize"], string(b))
}

// TestStatuses walks every route through its answers and refusals.
func TestStatuses(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	checkout := f.contract(t, "checkout-token", "payments.authorize")
	orders := f.contract(t, "orders-token", "notifications.send")
	notifier := f.contract(t, "notifier-token", "notifications.send")
	gateway := f.contract(t, "gateway-token", "payments.authorize")
	replayer := f.contract(t, "notify-replay-token", "notifications.send")
	limited := f.contract(t, "alice-token", "limited.events")
	euOrders := func() string {
		r := f.do(t, http.MethodPost, "/v1/contracts", "orders-token", `{"subjects":["notifications.send"]}`, "x-pigeon-region", "eu")
		require.Equal(t, http.StatusCreated, r.status)
		return r.json(t)["contract"].(map[string]any)["id"].(string)
	}()

	pay := func(mutate func(m *pigeon.Message)) string {
		m := demo.Payment("o-" + fmt.Sprint(time.Now().UnixNano()))
		if mutate != nil {
			mutate(m)
		}
		return msgBody(t, m)
	}
	withData := func(d string) func(*pigeon.Message) { return func(m *pigeon.Message) { m.Data = json.RawMessage(d) } }
	note := msgBody(t, demo.Notification("n-1"))
	accepted := f.do(t, http.MethodPost, "/v1/messages", "orders-token", note, "x-pigeon-contract", orders)
	require.Equal(t, http.StatusAccepted, accepted.status, "%s", accepted.body)
	noteID := accepted.json(t)["message"].(map[string]any)["id"].(string)
	huge := `{"subjects":["` + strings.Repeat("x", 1<<20) + `"]}`

	type tc struct {
		name         string
		method, path string
		token, body  string
		headers      []string
		status       int
		code         pigeon.Code // for error answers
	}
	tests := []tc{
		// Method and path.
		{"health wrong method", "POST", "/health", "", "", nil, 405, pigeon.CodeMethodNotAllowed},
		{"unknown path", "GET", "/nope", "", "", nil, 404, pigeon.CodeNotFound},
		{"unknown nested path", "GET", "/v1/subjects/a/b/c", "", "", nil, 404, pigeon.CodeNotFound},
		{"subjects wrong method", "DELETE", "/v1/subjects", "", "", nil, 405, pigeon.CodeMethodNotAllowed},
		{"unknown subject", "GET", "/v1/subjects/nope", "", "", nil, 404, pigeon.CodeSubjectNotFound},
		{"messages wrong method", "GET", "/v1/messages", "checkout-token", "", nil, 405, pigeon.CodeMethodNotAllowed},
		{"ws wrong method", "POST", "/v1/ws", "checkout-token", "", nil, 405, pigeon.CodeMethodNotAllowed},
		{"ws without credential", "GET", "/v1/ws", "", "", nil, 401, pigeon.CodeUnauthenticated},

		// Authentication.
		{"negotiate without credential", "POST", "/v1/contracts", "", `{"subjects":["payments.authorize"]}`, nil, 401, pigeon.CodeUnauthenticated},
		{"negotiate unknown credential", "POST", "/v1/contracts", "nobody-token", `{"subjects":["payments.authorize"]}`, nil, 401, pigeon.CodeUnauthenticated},
		{"publish without credential", "POST", "/v1/messages", "", note, nil, 401, pigeon.CodeUnauthenticated},

		// Contracts.
		{"negotiate", "POST", "/v1/contracts", "checkout-token", `{"subjects":["payments.authorize"],"ttlMs":60000}`, nil, 201, ""},
		{"negotiate nothing permitted", "POST", "/v1/contracts", "catalog-token", `{"subjects":["payments.authorize"]}`, nil, 403, pigeon.CodeNoPermittedSubjects},
		{"negotiate unknown subject", "POST", "/v1/contracts", "checkout-token", `{"subjects":["nope"]}`, nil, 404, pigeon.CodeSubjectNotFound},
		{"negotiate no subjects", "POST", "/v1/contracts", "checkout-token", `{"subjects":[]}`, nil, 400, pigeon.CodeBadRequest},
		{"negotiate not JSON", "POST", "/v1/contracts", "checkout-token", `subjects=a`, nil, 400, pigeon.CodeBadRequest},
		{"negotiate no body", "POST", "/v1/contracts", "checkout-token", ``, nil, 400, pigeon.CodeBadRequest},
		{"negotiate wrong type", "POST", "/v1/contracts", "checkout-token", `{"subjects":"payments.authorize"}`, nil, 400, pigeon.CodeBadRequest},
		{"negotiate array body", "POST", "/v1/contracts", "checkout-token", `["payments.authorize"]`, nil, 400, pigeon.CodeBadRequest},
		{"negotiate too large", "POST", "/v1/contracts", "checkout-token", huge, nil, 413, pigeon.CodePayloadTooLarge},
		{"contracts wrong method", "GET", "/v1/contracts", "checkout-token", "", nil, 405, pigeon.CodeMethodNotAllowed},
		{"get contract", "GET", "/v1/contracts/" + checkout, "checkout-token", "", nil, 200, ""},
		{"get another's contract", "GET", "/v1/contracts/" + checkout, "orders-token", "", nil, 403, pigeon.CodeContractPrincipalMismatch},
		{"get unknown contract", "GET", "/v1/contracts/ctr_nope", "checkout-token", "", nil, 403, pigeon.CodeContractNotFound},
		{"revoke another's contract", "DELETE", "/v1/contracts/" + checkout, "orders-token", "", nil, 403, pigeon.CodeContractPrincipalMismatch},
		{"contract wrong method", "PUT", "/v1/contracts/" + checkout, "checkout-token", "", nil, 405, pigeon.CodeMethodNotAllowed},
		{"renew contract", "POST", "/v1/contracts/" + checkout + "/renew", "checkout-token", `{"ttlMs":600000}`, nil, 200, ""},
		{"renew contract, no body", "POST", "/v1/contracts/" + checkout + "/renew", "checkout-token", "", nil, 200, ""},
		{"renew another's contract", "POST", "/v1/contracts/" + checkout + "/renew", "orders-token", "", nil, 403, pigeon.CodeContractPrincipalMismatch},
		{"renew unknown contract", "POST", "/v1/contracts/ctr_nope/renew", "checkout-token", "", nil, 403, pigeon.CodeContractNotFound},
		{"renew negative ttl", "POST", "/v1/contracts/" + checkout + "/renew", "checkout-token", `{"ttlMs":-1}`, nil, 400, pigeon.CodeInvalidArgument},
		{"renew ttl twice", "POST", "/v1/contracts/" + checkout + "/renew", "checkout-token", `{"ttlMs":1,"ttlMs":2}`, nil, 400, pigeon.CodeDuplicateKey},
		{"renew wrong method", "GET", "/v1/contracts/" + checkout + "/renew", "checkout-token", "", nil, 405, pigeon.CodeMethodNotAllowed},
		{"renew without credential", "POST", "/v1/contracts/" + checkout + "/renew", "", "", nil, 401, pigeon.CodeUnauthenticated},

		// Publish.
		{"publish accepted", "POST", "/v1/messages", "checkout-token", pay(nil), []string{"x-pigeon-contract", checkout}, 202, ""},
		{"publish duplicate", "POST", "/v1/messages", "orders-token", note, []string{"x-pigeon-contract", orders}, 200, ""},
		{"publish contract in body", "POST", "/v1/messages", "checkout-token", pay(func(m *pigeon.Message) { m.ContractID = checkout }), nil, 202, ""},
		{"publish without contract", "POST", "/v1/messages", "checkout-token", pay(nil), nil, 403, pigeon.CodeContractRequired},
		{"publish unknown contract", "POST", "/v1/messages", "checkout-token", pay(nil), []string{"x-pigeon-contract", "ctr_nope"}, 403, pigeon.CodeContractNotFound},
		{"publish under another's contract", "POST", "/v1/messages", "orders-token", pay(nil), []string{"x-pigeon-contract", checkout}, 403, pigeon.CodeContractPrincipalMismatch},
		{"publish outside contract", "POST", "/v1/messages", "orders-token", pay(nil), []string{"x-pigeon-contract", orders}, 403, pigeon.CodeSubjectNotInContract},
		{"publish not granted", "POST", "/v1/messages", "gateway-token", pay(nil), []string{"x-pigeon-contract", gateway}, 403, pigeon.CodeOperationNotInContract},
		{"publish intent", "POST", "/v1/messages", "checkout-token", pay(func(m *pigeon.Message) { m.Intent = "refund" }), []string{"x-pigeon-contract", checkout}, 403, pigeon.CodeIntentDenied},
		{"publish region", "POST", "/v1/messages", "orders-token", note, []string{"x-pigeon-contract", euOrders, "x-pigeon-region", "eu"}, 403, pigeon.CodeRegionDenied},
		{"publish schema", "POST", "/v1/messages", "checkout-token", pay(withData(`{"merchantId":"m"}`)), []string{"x-pigeon-contract", checkout}, 422, pigeon.CodeSchemaInvalid},
		{"publish forbidden field", "POST", "/v1/messages", "checkout-token", pay(withData(`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP","paymentToken":"t","card":{"pan":"4111111111111111"}}`)), []string{"x-pigeon-contract", checkout}, 422, pigeon.CodeSensitiveFieldDenied},
		{"publish raw PAN", "POST", "/v1/messages", "checkout-token", pay(withData(`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP","paymentToken":"4111111111111111"}`)), []string{"x-pigeon-contract", checkout}, 422, pigeon.CodeRawPANDetected},
		{"publish idempotency", "POST", "/v1/messages", "checkout-token", pay(func(m *pigeon.Message) { m.IdempotencyKey = "" }), []string{"x-pigeon-contract", checkout}, 422, pigeon.CodeIdempotencyRequired},
		{"publish classification", "POST", "/v1/messages", "checkout-token", pay(func(m *pigeon.Message) { m.Classification = "internal" }), []string{"x-pigeon-contract", checkout}, 422, pigeon.CodeClassificationDenied},
		{"publish envelope", "POST", "/v1/messages", "checkout-token", pay(func(m *pigeon.Message) { m.Type = "" }), []string{"x-pigeon-contract", checkout}, 422, pigeon.CodeEnvelopeInvalid},
		{"publish array", "POST", "/v1/messages", "checkout-token", `[1]`, []string{"x-pigeon-contract", checkout}, 422, pigeon.CodeEnvelopeInvalid},
		{"publish field type", "POST", "/v1/messages", "checkout-token", `{"subject":7}`, []string{"x-pigeon-contract", checkout}, 422, pigeon.CodeEnvelopeInvalid},
		{"publish not JSON", "POST", "/v1/messages", "checkout-token", `{"subject":`, []string{"x-pigeon-contract", checkout}, 400, pigeon.CodeBadRequest},
		{"publish no body", "POST", "/v1/messages", "checkout-token", ``, []string{"x-pigeon-contract", checkout}, 400, pigeon.CodeBadRequest},
		{"publish too large", "POST", "/v1/messages", "checkout-token", `{"data":"` + strings.Repeat("x", 1<<20) + `"}`, []string{"x-pigeon-contract", checkout}, 413, pigeon.CodePayloadTooLarge},
		{"publish rate limited", "POST", "/v1/messages", "alice-token", `{"type":"t","subject":"limited.events","intent":"record"}`, []string{"x-pigeon-contract", limited}, 202, ""},
		{"publish rate limited again", "POST", "/v1/messages", "alice-token", `{"type":"t","subject":"limited.events","intent":"record"}`, []string{"x-pigeon-contract", limited}, 429, pigeon.CodeRateLimited},

		// Receive, ack, nack, replay.
		{"receive", "POST", "/v1/subjects/notifications.send/receive", "notifier-token", `{"max":10}`, []string{"x-pigeon-contract", notifier}, 200, ""},
		{"receive no body", "POST", "/v1/subjects/notifications.send/receive", "notifier-token", ``, []string{"x-pigeon-contract", notifier}, 200, ""},
		{"receive contract in body", "POST", "/v1/subjects/notifications.send/receive", "notifier-token", `{"contractId":"` + notifier + `"}`, nil, 200, ""},
		{"receive without contract", "POST", "/v1/subjects/notifications.send/receive", "notifier-token", `{}`, nil, 403, pigeon.CodeContractRequired},
		{"receive not granted", "POST", "/v1/subjects/notifications.send/receive", "orders-token", `{}`, []string{"x-pigeon-contract", orders}, 403, pigeon.CodeOperationNotInContract},
		{"receive unknown subject", "POST", "/v1/subjects/nope/receive", "notifier-token", `{}`, []string{"x-pigeon-contract", notifier}, 404, pigeon.CodeSubjectNotFound},
		{"receive not JSON", "POST", "/v1/subjects/notifications.send/receive", "notifier-token", `max=1`, []string{"x-pigeon-contract", notifier}, 400, pigeon.CodeBadRequest},
		{"receive wrong type", "POST", "/v1/subjects/notifications.send/receive", "notifier-token", `{"max":"ten"}`, []string{"x-pigeon-contract", notifier}, 400, pigeon.CodeBadRequest},
		{"receive wrong method", "GET", "/v1/subjects/notifications.send/receive", "notifier-token", "", nil, 405, pigeon.CodeMethodNotAllowed},
		{"nack", "POST", "/v1/subjects/notifications.send/nack", "notifier-token", `{"messageId":"` + noteID + `","delayMs":0}`, []string{"x-pigeon-contract", notifier}, 200, ""},
		{"receive again", "POST", "/v1/subjects/notifications.send/receive", "notifier-token", `{}`, []string{"x-pigeon-contract", notifier}, 200, ""},
		{"ack", "POST", "/v1/subjects/notifications.send/ack", "notifier-token", `{"messageId":"` + noteID + `"}`, []string{"x-pigeon-contract", notifier}, 200, ""},
		{"ack twice", "POST", "/v1/subjects/notifications.send/ack", "notifier-token", `{"messageId":"` + noteID + `"}`, []string{"x-pigeon-contract", notifier}, 200, ""},
		{"ack unknown message", "POST", "/v1/subjects/notifications.send/ack", "notifier-token", `{"messageId":"msg_nope"}`, []string{"x-pigeon-contract", notifier}, 404, pigeon.CodeMessageNotFound},
		{"ack without message id", "POST", "/v1/subjects/notifications.send/ack", "notifier-token", `{}`, []string{"x-pigeon-contract", notifier}, 400, pigeon.CodeBadRequest},
		{"ack not granted", "POST", "/v1/subjects/notifications.send/ack", "orders-token", `{"messageId":"` + noteID + `"}`, []string{"x-pigeon-contract", orders}, 403, pigeon.CodeOperationNotInContract},
		{"replay", "POST", "/v1/subjects/notifications.send/replay", "notify-replay-token", `{"reason":"audit","fromSequence":1,"toSequence":5}`, []string{"x-pigeon-contract", replayer}, 200, ""},
		{"replay without reason", "POST", "/v1/subjects/notifications.send/replay", "notify-replay-token", `{}`, []string{"x-pigeon-contract", replayer}, 403, pigeon.CodeReplayDenied},
		{"replay not allowed", "POST", "/v1/subjects/payments.authorize/replay", "checkout-token", `{"reason":"x"}`, []string{"x-pigeon-contract", checkout}, 403, pigeon.CodeReplayDenied},

		// Audit and quarantine need the auditor role.
		{"audit without credential", "GET", "/v1/audit", "", "", nil, 401, pigeon.CodeUnauthenticated},
		{"audit without role", "GET", "/v1/audit", "checkout-token", "", nil, 403, pigeon.CodeForbidden},
		{"audit", "GET", "/v1/audit?from=1&max=5", "auditor-token", "", nil, 200, ""},
		{"audit bad query", "GET", "/v1/audit?max=many", "auditor-token", "", nil, 400, pigeon.CodeBadRequest},
		{"audit wrong method", "POST", "/v1/audit", "auditor-token", "", nil, 405, pigeon.CodeMethodNotAllowed},
		{"quarantine without credential", "GET", "/v1/quarantine", "", "", nil, 401, pigeon.CodeUnauthenticated},
		{"quarantine without role", "GET", "/v1/quarantine", "checkout-token", "", nil, 403, pigeon.CodeForbidden},
		{"quarantine", "GET", "/v1/quarantine", "auditor-token", "", nil, 200, ""},
		{"quarantine bad since", "GET", "/v1/quarantine?since=yesterday", "auditor-token", "", nil, 400, pigeon.CodeBadRequest},
		{"quarantine unknown record", "GET", "/v1/quarantine/qr_nope", "auditor-token", "", nil, 404, pigeon.CodeQuarantineNotFound},
		{"release without credential", "POST", "/v1/quarantine/qr_nope/release", "", "", nil, 401, pigeon.CodeUnauthenticated},
		{"release without role", "POST", "/v1/quarantine/qr_nope/release", "checkout-token", "", []string{"x-pigeon-contract", checkout}, 403, pigeon.CodeForbidden},
		{"release without contract", "POST", "/v1/quarantine/qr_nope/release", "auditor-token", "", nil, 403, pigeon.CodeContractRequired},
		{"release unknown record", "POST", "/v1/quarantine/qr_nope/release", "checkout-auditor-token", "", []string{"x-pigeon-contract", checkout}, 404, pigeon.CodeQuarantineNotFound},
		{"release wrong method", "GET", "/v1/quarantine/qr_nope/release", "auditor-token", "", nil, 405, pigeon.CodeMethodNotAllowed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := f.do(t, tc.method, tc.path, tc.token, tc.body, tc.headers...)
			require.Equal(t, tc.status, r.status, "body %s", r.body)
			require.Equal(t, "application/json", r.header.Get("Content-Type"))
			require.Equal(t, "no-store", r.header.Get("Cache-Control"), "no cache keeps an answer")
			if tc.code != "" {
				require.Equal(t, tc.code, r.code(t))
				require.Equal(t, wire.HTTPStatus(tc.code), r.status, "status follows the code")
			} else {
				require.True(t, json.Valid(r.body))
			}
			if tc.status == http.StatusMethodNotAllowed {
				require.NotEmpty(t, r.header.Get("Allow"))
			}
			if tc.status == http.StatusUnauthorized {
				require.Contains(t, r.header.Get("WWW-Authenticate"), "Bearer")
			}
		})
	}
	_ = ctx
}

func TestAllowHeaders(t *testing.T) {
	f := newFixture(t)
	for path, allow := range map[string]string{
		"/health": "GET", "/v1/subjects": "GET", "/v1/subjects/x": "GET", "/v1/contracts": "POST",
		"/v1/contracts/x": "DELETE, GET", "/v1/messages": "POST", "/v1/subjects/x/receive": "POST",
		"/v1/subjects/x/ack": "POST", "/v1/subjects/x/replay": "POST", "/v1/audit": "GET",
		"/v1/quarantine": "GET", "/v1/quarantine/x/release": "POST", "/v1/ws": "GET",
	} {
		r := f.do(t, http.MethodPatch, path, "", "")
		require.Equal(t, http.StatusMethodNotAllowed, r.status, path)
		require.Equal(t, allow, r.header.Get("Allow"), path)
	}
}

func TestContractLifecycle(t *testing.T) {
	f := newFixture(t)
	id := f.contract(t, "checkout-token", "payments.authorize")
	r := f.do(t, http.MethodGet, "/v1/contracts/"+id, "checkout-token", "")
	require.Equal(t, http.StatusOK, r.status)
	c := r.json(t)["contract"].(map[string]any)
	require.Equal(t, id, c["id"])
	require.Equal(t, demo.Checkout, c["principal"])
	require.Equal(t, "uk", c["region"], "the default region of the HTTP API")

	r = f.do(t, http.MethodDelete, "/v1/contracts/"+id, "checkout-token", "")
	require.Equal(t, http.StatusOK, r.status)
	require.JSONEq(t, `{"id":"`+id+`","revoked":true}`, string(r.body))
	r = f.do(t, http.MethodPost, "/v1/messages", "checkout-token", msgBody(t, demo.Payment("o-1")), "x-pigeon-contract", id)
	require.Equal(t, http.StatusForbidden, r.status)
	require.Equal(t, pigeon.CodeContractRevoked, r.code(t))

	id = f.contract(t, "checkout-token", "payments.authorize")
	f.clock.Advance(16 * time.Minute)
	r = f.do(t, http.MethodPost, "/v1/messages", "checkout-token", msgBody(t, demo.Payment("o-2")), "x-pigeon-contract", id)
	require.Equal(t, http.StatusForbidden, r.status)
	require.Equal(t, pigeon.CodeContractExpired, r.code(t))
}

func TestPublishAnswers(t *testing.T) {
	f := newFixture(t)
	id := f.contract(t, "checkout-token", "payments.authorize")
	r := f.do(t, http.MethodPost, "/v1/messages", "checkout-token", msgBody(t, demo.Payment("o-1")), "x-pigeon-contract", id)
	require.Equal(t, http.StatusAccepted, r.status)
	body := r.json(t)
	require.Equal(t, "accepted", body["status"])
	m := body["message"].(map[string]any)
	require.Equal(t, demo.Checkout, m["source"], "source is the authenticated principal")
	require.Equal(t, float64(1), m["sequence"])
	require.Equal(t, id, m["contractId"])
	require.Equal(t, "uk", m["region"])
	for _, k := range []string{"id", "subjectId", "schemaId", "acceptedAt", "time"} {
		require.NotEmpty(t, m[k], k)
	}
	r = f.do(t, http.MethodPost, "/v1/messages", "checkout-token", msgBody(t, demo.Payment("o-1")), "x-pigeon-contract", id)
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, "duplicate", r.json(t)["status"])
	require.Equal(t, m["id"], r.json(t)["message"].(map[string]any)["id"])
}

// The quarantine lists redacted records to the auditor; release
// re-publishes through every gate under the releaser's contract.
func TestQuarantineAndRelease(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	pay := f.contract(t, "checkout-token", "payments.authorize")
	m := demo.Payment("o-9")
	m.Data = json.RawMessage(`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP","paymentToken":"t","card":{"pan":"4111111111111111"}}`)
	r := f.do(t, http.MethodPost, "/v1/messages", "checkout-token", msgBody(t, m), "x-pigeon-contract", pay)
	require.Equal(t, http.StatusUnprocessableEntity, r.status)
	qid := r.json(t)["error"].(map[string]any)["details"].(map[string]any)["quarantineId"].(string)

	r = f.do(t, http.MethodGet, "/v1/quarantine", "auditor-token", "")
	require.Equal(t, http.StatusOK, r.status)
	require.NotContains(t, string(r.body), "4111111111111111")
	require.Contains(t, string(r.body), `"pan":"[REDACTED]"`)
	recs := r.json(t)["records"].([]any)
	require.Len(t, recs, 1)
	require.Equal(t, qid, recs[0].(map[string]any)["id"])
	require.Equal(t, "SENSITIVE_FIELD_DENIED", recs[0].(map[string]any)["code"])

	r = f.do(t, http.MethodGet, "/v1/quarantine/"+qid, "auditor-token", "")
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, qid, r.json(t)["record"].(map[string]any)["id"])

	// The redacted PAN is still a forbidden field: release is refused again.
	r = f.do(t, http.MethodPost, "/v1/quarantine/"+qid+"/release", "checkout-auditor-token", "", "x-pigeon-contract", pay)
	require.Equal(t, http.StatusUnprocessableEntity, r.status)
	require.Equal(t, pigeon.CodeSensitiveFieldDenied, r.code(t))

	// A schema violation released after the schema was relaxed goes through.
	ev := f.contract(t, "checkout-token", "orders.events")
	r = f.do(t, http.MethodPost, "/v1/messages", "checkout-token", `{"type":"order.created","subject":"orders.events","intent":"record","data":{"order":"o-1"}}`, "x-pigeon-contract", ev)
	require.Equal(t, http.StatusUnprocessableEntity, r.status)
	require.Equal(t, pigeon.CodeSchemaInvalid, r.code(t))
	qid = r.json(t)["error"].(map[string]any)["details"].(map[string]any)["quarantineId"].(string)
	p, err := f.e.Subject("orders.events")
	require.NoError(t, err)
	p.Schema, p.Version = nil, "v2"
	require.NoError(t, f.e.ReplaceSubject(ctx, p))
	ev = f.contract(t, "checkout-auditor-token", "orders.events")
	r = f.do(t, http.MethodPost, "/v1/quarantine/"+qid+"/release", "checkout-auditor-token", `{"contractId":"`+ev+`"}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	require.Equal(t, "accepted", r.json(t)["status"])
	r = f.do(t, http.MethodPost, "/v1/quarantine/"+qid+"/release", "checkout-auditor-token", "", "x-pigeon-contract", ev)
	require.Equal(t, http.StatusBadRequest, r.status, "released once")

	r = f.do(t, http.MethodGet, "/v1/audit", "auditor-token", "")
	require.Equal(t, http.StatusOK, r.status)
	types := map[string]bool{}
	for _, rec := range r.json(t)["records"].([]any) {
		types[rec.(map[string]any)["type"].(string)] = true
	}
	for _, want := range []string{"contract.negotiated", "publish.denied", "quarantine.created", "quarantine.released", "publish.accepted"} {
		require.True(t, types[want], "audit has %s", want)
	}
	n, err := f.e.VerifyAudit(ctx)
	require.NoError(t, err)
	require.Positive(t, n)
}

func TestMountBehindAuthentication(t *testing.T) {
	f := newFixture(t)
	require.NoError(t, f.s.Mount("/app/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := server.PrincipalFrom(r.Context())
		fmt.Fprintf(w, "%s %s", p.ID, server.RegionFrom(r.Context()))
	})))
	r := f.do(t, http.MethodGet, "/app/orders", "", "")
	require.Equal(t, http.StatusUnauthorized, r.status)
	require.Equal(t, pigeon.CodeUnauthenticated, r.code(t))
	r = f.do(t, http.MethodGet, "/app/orders", "orders-token", "", "x-pigeon-region", "eu")
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, demo.Orders+" eu", string(r.body))
	require.Error(t, f.s.Mount("/v1/messages", http.NotFoundHandler()), "a taken route")
	require.Error(t, f.s.Mount("", http.NotFoundHandler()), "an invalid pattern")
	require.Nil(t, server.PrincipalFrom(context.Background()))
}

func TestWebSocketEndpointIsMounted(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, f.hs.URL+"/v1/ws", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer checkout-token"}}})
	require.NoError(t, err)
	defer c.CloseNow()
	require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(`{"op":"negotiate","id":"1","subjects":["payments.authorize"]}`)))
	_, b, err := c.Read(ctx)
	require.NoError(t, err)
	require.Contains(t, string(b), `"op":"contract"`)
	require.Contains(t, string(b), `"region":"uk"`, "the server's default region")
	require.Equal(t, int64(1), f.s.WebSocket().Stats().Open)
}

func TestWebSocketEndpointNeedsAnUpgrade(t *testing.T) {
	f := newFixture(t)
	r := f.do(t, http.MethodGet, "/v1/ws", "checkout-token", "")
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Equal(t, pigeon.CodeBadRequest, r.code(t))
}
