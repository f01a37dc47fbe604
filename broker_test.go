package pigeon_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/internal/wire"
	"pigeon/store"
	"pigeon/store/memory"
)

func TestAcceptedPayment(t *testing.T) {
	f := newFixture(t)
	s := f.connect("checkout-token", "payments.authorize")
	res, err := s.Publish(ctx, demo.Payment("o-1"))
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusAccepted, res.Status)
	m := res.Message
	require.Equal(t, uint64(1), m.Sequence)
	require.Equal(t, demo.Checkout, m.Source)
	require.Equal(t, s.Contract().ID(), m.ContractID)
	require.Equal(t, "payments.authorize", m.SubjectID)
	require.Equal(t, "payment.authorization.v1", m.SchemaID)
	require.NotEmpty(t, m.AcceptedAt)
	require.True(t, strings.HasPrefix(m.ID, "msg_"))
	res2, err := s.Publish(ctx, demo.Payment("o-2"))
	require.NoError(t, err)
	require.Equal(t, uint64(2), res2.Message.Sequence)
}

func TestSpoofedSourceIgnored(t *testing.T) {
	f := newFixture(t)
	s := f.connect("checkout-token", "payments.authorize")
	m := demo.Payment("o-1")
	m.Source = demo.Gateway
	res, err := s.Publish(ctx, m)
	require.NoError(t, err)
	require.Equal(t, demo.Checkout, res.Message.Source)
	require.Equal(t, demo.Gateway, m.Source, "the caller's message is not modified")
}

func TestDuplicateRetryAndTTLWindow(t *testing.T) {
	f := newFixture(t)
	s := f.connect("checkout-token", "payments.authorize")
	first, err := s.Publish(ctx, demo.Payment("o-1"))
	require.NoError(t, err)
	retry, err := s.Publish(ctx, demo.Payment("o-1"))
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusDuplicate, retry.Status)
	require.Equal(t, first.Message.ID, retry.Message.ID)
	require.Equal(t, first.Message.Sequence, retry.Message.Sequence)

	gw := f.connect("gateway-token", "payments.authorize")
	got, err := gw.Receive(ctx, "payments.authorize", 10)
	require.NoError(t, err)
	require.Len(t, got, 1, "a retried payment is not charged twice")

	// payments.authorize keeps idempotency keys for 48 hours.
	f.clock.Advance(48*time.Hour + time.Second)
	s2 := f.connect("checkout-token", "payments.authorize")
	after, err := s2.Publish(ctx, demo.Payment("o-1"))
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusAccepted, after.Status)
	require.Equal(t, uint64(2), after.Message.Sequence)
}

func TestIdempotencyScopedToPrincipal(t *testing.T) {
	f := newFixture(t)
	orders := f.connect("orders-token", "notifications.send")
	_, err := orders.Publish(ctx, demo.Notification("k-1"))
	require.NoError(t, err)
	// Same key on another subject is independent.
	s := f.connect("checkout-token", "payments.authorize")
	m := demo.Payment("o-1")
	m.IdempotencyKey = "k-1"
	res, err := s.Publish(ctx, m)
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusAccepted, res.Status)
}

func TestNegotiation(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name     string
		token    string
		subjects []string
		code     pigeon.Code
		ops      map[string][]pigeon.Operation
	}{
		{"checkout publishes payments", "checkout-token", []string{"payments.authorize"}, "",
			map[string][]pigeon.Operation{"payments.authorize": {pigeon.OpPublish}}},
		{"gateway receives and acks", "gateway-token", []string{"payments.authorize"}, "",
			map[string][]pigeon.Operation{"payments.authorize": {pigeon.OpReceive, pigeon.OpAck}}},
		{"intersection drops unpermitted subjects", "orders-token", []string{"payments.authorize", "notifications.send"}, "",
			map[string][]pigeon.Operation{"notifications.send": {pigeon.OpPublish}}},
		{"attacker denied", "catalog-token", []string{"payments.authorize", "notifications.send"}, pigeon.CodeNoPermittedSubjects, nil},
		{"unknown subject", "checkout-token", []string{"nope"}, pigeon.CodeSubjectNotFound, nil},
		{"unknown token", "who-token", []string{"payments.authorize"}, pigeon.CodeUnauthenticated, nil},
		{"empty token", "", []string{"payments.authorize"}, pigeon.CodeUnauthenticated, nil},
		{"no subjects", "checkout-token", nil, pigeon.CodeBadRequest, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := f.e.Connect(ctx, tc.token, tc.subjects)
			if tc.code != "" {
				requireCode(t, err, tc.code)
				return
			}
			require.NoError(t, err)
			info := s.Contract().Info()
			require.Len(t, info.Subjects, len(tc.ops))
			for _, cs := range info.Subjects {
				require.Equal(t, tc.ops[cs.Name], cs.Operations)
				require.Equal(t, cs.Name+"@v1", cs.PolicyID)
			}
			require.Equal(t, 15*time.Minute, info.ExpiresAt.Sub(info.IssuedAt))
			require.True(t, strings.HasPrefix(info.ID, "ctr_"))
			require.GreaterOrEqual(t, len(info.ID), 40, "contract ids are unguessable")
		})
	}
}

func TestContractJSONShape(t *testing.T) {
	f := newFixture(t)
	s := f.connect("checkout-token", "payments.authorize")
	b, err := json.Marshal(s.Contract().Info())
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(b, &got))
	for _, k := range []string{"id", "principal", "subjects", "policyIds", "issuedAt", "expiresAt"} {
		require.Contains(t, got, k)
	}
	sub := got["subjects"].([]any)[0].(map[string]any)
	for _, k := range []string{"name", "subjectId", "schemaId", "policyId", "operations"} {
		require.Contains(t, sub, k)
	}
	require.Equal(t, []any{"payments.authorize@v1"}, got["policyIds"])
}

func TestContractFailures(t *testing.T) {
	f := newFixture(t)
	checkout := f.connect("checkout-token", "payments.authorize")
	gateway := f.connect("gateway-token", "payments.authorize")
	checkoutP, err := f.e.Authenticate(ctx, "checkout-token")
	require.NoError(t, err)
	ordersP, err := f.e.Authenticate(ctx, "orders-token")
	require.NoError(t, err)
	tests := []struct {
		name   string
		caller pigeon.Caller
		msg    func() *pigeon.Message
		code   pigeon.Code
	}{
		{"no contract", pigeon.Caller{Principal: checkoutP, Region: "uk"}, func() *pigeon.Message { return demo.Payment("a") }, pigeon.CodeContractRequired},
		{"unknown contract", pigeon.Caller{Principal: checkoutP, Region: "uk", ContractID: "ctr_nope"}, func() *pigeon.Message { return demo.Payment("a") }, pigeon.CodeContractNotFound},
		{"stolen contract", pigeon.Caller{Principal: ordersP, Region: "uk", ContractID: checkout.Contract().ID()}, func() *pigeon.Message { return demo.Payment("a") }, pigeon.CodeContractPrincipalMismatch},
		{"subject outside contract", pigeon.Caller{Principal: checkoutP, Region: "uk", ContractID: checkout.Contract().ID()}, func() *pigeon.Message { return demo.Notification("k") }, pigeon.CodeSubjectNotInContract},
		{"unknown subject", pigeon.Caller{Principal: checkoutP, Region: "uk", ContractID: checkout.Contract().ID()}, func() *pigeon.Message { m := demo.Payment("a"); m.Subject = "nope"; return m }, pigeon.CodeSubjectNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.e.Publish(ctx, tc.caller, tc.msg())
			pe := requireCode(t, err, tc.code)
			require.ErrorIs(t, err, pigeon.ErrDenied)
			if tc.code != pigeon.CodeSubjectNotFound {
				require.Equal(t, pigeon.GateContract, pe.Decision.Gate)
			}
		})
	}
	t.Run("operation outside contract", func(t *testing.T) {
		_, err := gateway.Publish(ctx, demo.Payment("g"))
		requireCode(t, err, pigeon.CodeOperationNotInContract)
	})
	t.Run("expired contract", func(t *testing.T) {
		f.clock.Advance(15*time.Minute + time.Millisecond)
		_, err := checkout.Publish(ctx, demo.Payment("late"))
		requireCode(t, err, pigeon.CodeContractExpired)
		require.ErrorIs(t, err, pigeon.ErrContract)
	})
}

func TestRevokedContract(t *testing.T) {
	f := newFixture(t)
	s := f.connect("checkout-token", "payments.authorize")
	p, err := f.e.Authenticate(ctx, "checkout-token")
	require.NoError(t, err)
	other, err := f.e.Authenticate(ctx, "orders-token")
	require.NoError(t, err)
	requireCode(t, f.e.RevokeContract(ctx, other, s.Contract().ID()), pigeon.CodeContractPrincipalMismatch)
	require.NoError(t, f.e.RevokeContract(ctx, p, s.Contract().ID()))
	require.NoError(t, f.e.RevokeContract(ctx, p, s.Contract().ID()), "revoking twice is a no-op")
	_, err = s.Publish(ctx, demo.Payment("o-1"))
	requireCode(t, err, pigeon.CodeContractRevoked)
}

func TestStaleContractAfterPolicyChange(t *testing.T) {
	f := newFixture(t)
	s := f.connect("checkout-token", "payments.authorize")
	_, err := s.Publish(ctx, demo.Payment("o-1"))
	require.NoError(t, err)
	p, err := f.e.Subject("payments.authorize")
	require.NoError(t, err)
	// Reloading the identical policy changes nothing.
	require.NoError(t, f.e.ReplaceSubject(ctx, p))
	_, err = s.Publish(ctx, demo.Payment("o-2"))
	require.NoError(t, err)

	p.Version = "v2"
	p.Intents = append(p.Intents, "refund_payment")
	require.NoError(t, f.e.ReplaceSubject(ctx, p))
	_, err = s.Publish(ctx, demo.Payment("o-3"))
	requireCode(t, err, pigeon.CodeContractStale)

	s2 := f.connect("checkout-token", "payments.authorize")
	require.Equal(t, []string{"payments.authorize@v2"}, s2.Contract().Info().PolicyIDs)
	_, err = s2.Publish(ctx, demo.Payment("o-3"))
	require.NoError(t, err)
}

func TestGateDenials(t *testing.T) {
	tests := []struct {
		name       string
		mutate     func(m *pigeon.Message)
		code       pigeon.Code
		gate       string
		quarantine bool
	}{
		{"incomplete envelope: no type", func(m *pigeon.Message) { m.Type = "" }, pigeon.CodeEnvelopeInvalid, pigeon.GateEnvelope, false},
		{"incomplete envelope: no intent", func(m *pigeon.Message) { m.Intent = "" }, pigeon.CodeEnvelopeInvalid, pigeon.GateEnvelope, false},
		{"bad specversion", func(m *pigeon.Message) { m.SpecVersion = "0.3" }, pigeon.CodeEnvelopeInvalid, pigeon.GateEnvelope, false},
		{"bad time", func(m *pigeon.Message) { m.Time = "yesterday" }, pigeon.CodeEnvelopeInvalid, pigeon.GateEnvelope, false},
		{"malformed data", func(m *pigeon.Message) { m.Data = json.RawMessage(`{"a":`) }, pigeon.CodeEnvelopeInvalid, pigeon.GateEnvelope, false},
		{"intent not on subject", func(m *pigeon.Message) { m.Intent = "refund_payment" }, pigeon.CodeIntentDenied, pigeon.GateRule, true},
		{"idempotency required", func(m *pigeon.Message) { m.IdempotencyKey = "" }, pigeon.CodeIdempotencyRequired, pigeon.GateIdempotency, false},
		{"classification mismatch", func(m *pigeon.Message) { m.Classification = "internal" }, pigeon.CodeClassificationDenied, pigeon.GateClassification, true},
		{"default classification mismatch", func(m *pigeon.Message) { m.Classification = "" }, pigeon.CodeClassificationDenied, pigeon.GateClassification, true},
		{"region denied", func(m *pigeon.Message) { m.Region = "us" }, pigeon.CodeRegionDenied, pigeon.GateRegion, true},
		{"cross region denied", func(m *pigeon.Message) { m.Region = "eu" }, pigeon.CodeRegionDenied, pigeon.GateRegion, true},
		{"forbidden card.pan", func(m *pigeon.Message) {
			m.Data = json.RawMessage(`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP","paymentToken":"tok_1","card":{"pan":"4111111111111111"}}`)
		}, pigeon.CodeSensitiveFieldDenied, pigeon.GateForbidden, true},
		{"raw PAN as token", func(m *pigeon.Message) {
			m.Data = json.RawMessage(`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP","paymentToken":"4111 1111 1111 1111"}`)
		}, pigeon.CodeRawPANDetected, pigeon.GateTokenized, true},
		{"schema invalid", func(m *pigeon.Message) {
			m.Data = json.RawMessage(`{"merchantId":"m","orderId":"o","amount":"lots","currency":"pounds","paymentToken":"tok_1"}`)
		}, pigeon.CodeSchemaInvalid, pigeon.GateSchema, true},
		{"schema missing field", func(m *pigeon.Message) {
			m.Data = json.RawMessage(`{"merchantId":"m","amount":1,"currency":"GBP","paymentToken":"tok_1"}`)
		}, pigeon.CodeSchemaInvalid, pigeon.GateSchema, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			s := f.connect("checkout-token", "payments.authorize")
			m := demo.Payment("o-1")
			tc.mutate(m)
			_, err := s.Publish(ctx, m)
			pe := requireCode(t, err, tc.code)
			require.Equal(t, tc.gate, pe.Decision.Gate)
			require.ErrorIs(t, err, pigeon.ErrDenied)
			if tc.quarantine {
				require.ErrorIs(t, err, pigeon.ErrQuarantined)
				require.NotEmpty(t, pe.Details["quarantineId"])
				rec, err := f.e.QuarantineRecord(ctx, pe.Details["quarantineId"].(string))
				require.NoError(t, err)
				require.Equal(t, string(tc.code), rec.Code)
			} else {
				require.NotErrorIs(t, err, pigeon.ErrQuarantined)
				require.Nil(t, pe.Details["quarantineId"])
			}
			// Nothing refused reaches a receiver.
			gw := f.connect("gateway-token", "payments.authorize")
			got, err := gw.Receive(ctx, "payments.authorize", 10)
			require.NoError(t, err)
			require.Empty(t, got)
			recs, err := f.e.Audit(ctx, 0, 0)
			require.NoError(t, err)
			require.Contains(t, auditTypes(recs), "publish.denied")
		})
	}
}

func TestOpaqueTokenAccepted(t *testing.T) {
	for _, tok := range []string{"tok_4111111111111111", "4111111111111112", "411111111111", "4111-1111-1111-111x"} {
		f := newFixture(t)
		s := f.connect("checkout-token", "payments.authorize")
		m := demo.Payment("o-1")
		m.Data = json.RawMessage(`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP","paymentToken":"` + tok + `"}`)
		_, err := s.Publish(ctx, m)
		require.NoError(t, err, tok)
	}
}

func TestIsPAN(t *testing.T) {
	tests := map[string]bool{
		"4111111111111111":     true,
		"4111 1111 1111 1111":  true,
		"4111-1111-1111-1111":  true,
		"5500005555555559":     true,
		"378282246310005":      true,
		"4111111111111112":     false,
		"411111111111":         false,
		"41111111111111111111": false,
		"tok_4111111111111111": false,
		"":                     false,
	}
	for in, want := range tests {
		require.Equal(t, want, pigeon.IsPAN(in), in)
	}
}

func TestQuarantineRedactsEverywhere(t *testing.T) {
	f := newFixture(t)
	s := f.connect("checkout-token", "payments.authorize")
	const pan = "4111111111111111"
	m := demo.Payment("o-1")
	m.Data = json.RawMessage(`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP","paymentToken":"` + pan + `","card":{"pan":"` + pan + `"}}`)
	_, err := s.Publish(ctx, m)
	pe := requireCode(t, err, pigeon.CodeSensitiveFieldDenied)
	require.NotContains(t, err.Error(), pan)
	id := pe.Details["quarantineId"].(string)
	rec, err := f.e.QuarantineRecord(ctx, id)
	require.NoError(t, err)
	var data map[string]any
	require.NoError(t, json.Unmarshal(rec.Message.Data, &data))
	require.Equal(t, pigeon.Redacted, data["card"].(map[string]any)["pan"])
	require.Equal(t, pigeon.Redacted, data["paymentToken"])
	require.Equal(t, "m", data["merchantId"], "other fields are kept")
	all, err := json.Marshal(rec)
	require.NoError(t, err)
	require.NotContains(t, string(all), pan)
	recs, err := f.e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	auditJSON, err := json.Marshal(recs)
	require.NoError(t, err)
	require.NotContains(t, string(auditJSON), pan)
	list, err := f.e.Quarantine(ctx, time.Time{}, 0)
	require.NoError(t, err)
	require.Len(t, list, 1)
}

func TestSSNForbidden(t *testing.T) {
	f := newFixture(t)
	s := f.connect("orders-token", "notifications.send")
	m := demo.Notification("k-1")
	m.Data = json.RawMessage(`{"recipientId":"c","channel":"sms","templateId":"t","recipient":{"ssn":"078-05-1120"}}`)
	_, err := s.Publish(ctx, m)
	pe := requireCode(t, err, pigeon.CodeSensitiveFieldDenied)
	rec, err := f.e.QuarantineRecord(ctx, pe.Details["quarantineId"].(string))
	require.NoError(t, err)
	require.NotContains(t, string(rec.Message.Data), "078-05-1120")
}

func TestQuarantineRelease(t *testing.T) {
	f := newFixture(t)
	s := f.connect("checkout-token", "payments.authorize")
	m := demo.Payment("o-1")
	m.Data = json.RawMessage(`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP"}`)
	_, err := s.Publish(ctx, m)
	pe := requireCode(t, err, pigeon.CodeSchemaInvalid)
	id := pe.Details["quarantineId"].(string)

	_, err = f.e.QuarantineRecord(ctx, "qr_nope")
	requireCode(t, err, pigeon.CodeQuarantineNotFound)

	// Releasing under the same policy fails the same gate again, and is audited.
	c := s.(interface{ Caller() pigeon.Caller }).Caller()
	_, err = f.e.ReleaseQuarantine(ctx, c, id)
	requireCode(t, err, pigeon.CodeSchemaInvalid)

	// The schema is relaxed (a new policy version); the releaser renegotiates.
	cat := demo.Catalog()
	cat.Schemas["payment.authorization.v2"] = []byte(`{"type":"object","required":["merchantId","orderId"]}`)
	p := cat.Subjects[indexOf(cat, "payments.authorize")]
	p.Version = "v2"
	p.Schema.Name = "payment.authorization.v2"
	cat.Subjects = []pigeon.SubjectPolicy{p}
	require.NoError(t, f.e.LoadCatalog(ctx, cat))
	s2 := f.connect("checkout-token", "payments.authorize")
	c2 := s2.(interface{ Caller() pigeon.Caller }).Caller()
	res, err := f.e.ReleaseQuarantine(ctx, c2, id)
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusAccepted, res.Status)
	rec, err := f.e.QuarantineRecord(ctx, id)
	require.NoError(t, err)
	require.True(t, rec.Released)
	require.Equal(t, res.Message.ID, rec.ReleasedAs)
	_, err = f.e.ReleaseQuarantine(ctx, c2, id)
	requireCode(t, err, pigeon.CodeBadRequest)
	recs, err := f.e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	require.Contains(t, auditTypes(recs), "quarantine.released")
}

func indexOf(c *pigeon.Catalog, name string) int {
	for i, s := range c.Subjects {
		if s.Name == name {
			return i
		}
	}
	return -1
}

func auditTypes(recs []pigeon.AuditRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Type
	}
	return out
}

func TestReceiveAckWorkQueue(t *testing.T) {
	f := newFixture(t)
	orders := f.connect("orders-token", "notifications.send")
	worker := f.connect("notifier-token", "notifications.send")
	for i := range 3 {
		_, err := orders.Publish(ctx, demo.Notification("k-"+string(rune('a'+i))))
		require.NoError(t, err)
	}
	got, err := worker.Receive(ctx, "notifications.send", 2)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, uint64(1), got[0].Sequence)
	require.NoError(t, worker.Ack(ctx, "notifications.send", got[0].ID))
	require.NoError(t, worker.Ack(ctx, "notifications.send", got[0].ID), "double ack is idempotent")

	more, err := worker.Receive(ctx, "notifications.send", 10)
	require.NoError(t, err)
	require.Len(t, more, 1, "leased messages are not handed out twice")
	require.Equal(t, uint64(3), more[0].Sequence)

	// The unacked lease expires (30 s ack wait) and comes back; the acked one never does.
	f.clock.Advance(31 * time.Second)
	again, err := worker.Receive(ctx, "notifications.send", 10)
	require.NoError(t, err)
	require.Len(t, again, 2)
	require.Equal(t, got[1].ID, again[0].ID)
	for _, m := range again {
		require.NotEqual(t, got[0].ID, m.ID)
		require.NoError(t, worker.Ack(ctx, "notifications.send", m.ID))
	}
	f.clock.Advance(2 * time.Minute)
	none, err := worker.Receive(ctx, "notifications.send", 10)
	require.NoError(t, err)
	require.Empty(t, none)

	err = worker.Ack(ctx, "notifications.send", "msg_unknown")
	requireCode(t, err, pigeon.CodeMessageNotFound)
	err = orders.Ack(ctx, "notifications.send", got[0].ID)
	requireCode(t, err, pigeon.CodeOperationNotInContract)
	_, err = orders.Receive(ctx, "notifications.send", 1)
	requireCode(t, err, pigeon.CodeOperationNotInContract)
}

func TestAckForeignLease(t *testing.T) {
	f := newFixture(t, func(o *pigeon.Options) {
		tok := append(demo.Tokens(), pigeon.StaticToken{Token: "notifier-2", Principal: demo.Notifier})
		o.Authenticator = pigeon.NewStaticTokens(tok...)
	})
	orders := f.connect("orders-token", "notifications.send")
	_, err := orders.Publish(ctx, demo.Notification("k-1"))
	require.NoError(t, err)
	w := f.connect("notifier-token", "notifications.send")
	got, err := w.Receive(ctx, "notifications.send", 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	// Before delivery nobody may ack; after, only the holder.
	p2 := f.connect("notify-replay-token", "notifications.send")
	err = p2.Ack(ctx, "notifications.send", got[0].ID)
	requireCode(t, err, pigeon.CodeOperationNotInContract)
}

func TestExhaustedDeliveryQuarantined(t *testing.T) {
	f := newFixture(t)
	orders := f.connect("orders-token", "notifications.send")
	w := f.connect("notifier-token", "notifications.send")
	res, err := orders.Publish(ctx, demo.Notification("k-1"))
	require.NoError(t, err)
	for range 5 { // maxAttempts
		got, err := w.Receive(ctx, "notifications.send", 1)
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.NoError(t, w.Nack(ctx, "notifications.send", got[0].ID, 0))
	}
	got, err := w.Receive(ctx, "notifications.send", 1)
	require.NoError(t, err)
	require.Empty(t, got)
	q, err := f.e.Quarantine(ctx, time.Time{}, 0)
	require.NoError(t, err)
	require.Len(t, q, 1)
	require.Equal(t, string(pigeon.CodeDeliveryExhausted), q[0].Code)
	require.Equal(t, res.Message.ID, q[0].MessageID)
}

func TestPubSubCursorPerPrincipal(t *testing.T) {
	cat := demo.Catalog()
	cat.Subjects = append(cat.Subjects, pigeon.SubjectPolicy{
		Name: "orders.events", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"notify"},
		Policy: map[pigeon.Operation][]pigeon.RuleSpec{
			pigeon.OpPublish: {{Effect: "allow", Principals: []string{demo.Orders}}},
			pigeon.OpReceive: {{Effect: "allow", Principals: []string{demo.Notifier, demo.Gateway}}},
			pigeon.OpAck:     {{Effect: "allow", Principals: []string{demo.Notifier}}},
		},
	})
	f := newFixture(t, func(o *pigeon.Options) { o.Catalog = cat })
	pub := f.connect("orders-token", "orders.events")
	for range 3 {
		_, err := pub.Publish(ctx, &pigeon.Message{Type: "t", Subject: "orders.events", Intent: "notify"})
		require.NoError(t, err)
	}
	a := f.connect("notifier-token", "orders.events")
	b := f.connect("gateway-token", "orders.events")
	ga, err := a.Receive(ctx, "orders.events", 2)
	require.NoError(t, err)
	require.Len(t, ga, 2)
	gb, err := b.Receive(ctx, "orders.events", 10)
	require.NoError(t, err)
	require.Len(t, gb, 3, "every receiving principal has its own cursor")
	ga2, err := a.Receive(ctx, "orders.events", 10)
	require.NoError(t, err)
	require.Len(t, ga2, 1)
	require.Equal(t, uint64(3), ga2[0].Sequence)
	require.NoError(t, a.Ack(ctx, "orders.events", ga2[0].ID))
}

func TestReplay(t *testing.T) {
	f := newFixture(t)
	orders := f.connect("orders-token", "notifications.send")
	for _, k := range []string{"k-1", "k-2", "k-3"} {
		_, err := orders.Publish(ctx, demo.Notification(k))
		require.NoError(t, err)
	}
	ops := f.connect("notify-replay-token", "notifications.send")
	_, err := ops.Replay(ctx, pigeon.ReplayRequest{Subject: "notifications.send"})
	requireCode(t, err, pigeon.CodeReplayDenied)
	got, err := ops.Replay(ctx, pigeon.ReplayRequest{Subject: "notifications.send", Reason: "incident-42 resend", FromSequence: 2})
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, uint64(2), got[0].Sequence)
	got, err = ops.Replay(ctx, pigeon.ReplayRequest{Subject: "notifications.send", Reason: "r", FromSequence: 1, ToSequence: 1})
	require.NoError(t, err)
	require.Len(t, got, 1)

	checkout := f.connect("checkout-token", "payments.authorize")
	_, err = checkout.Replay(ctx, pigeon.ReplayRequest{Subject: "payments.authorize", Reason: "r"})
	requireCode(t, err, pigeon.CodeReplayDenied)
	recs, err := f.e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	types := auditTypes(recs)
	require.Contains(t, types, "replay.denied")
	require.Contains(t, types, "replay.executed")
}

func TestRequestReply(t *testing.T) {
	f := newFixture(t)
	checkout := f.connect("checkout-token", "payments.authorize")
	gateway := f.connect("gateway-token", "payments.authorize")
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			got, err := gateway.Receive(ctx, "payments.authorize", 1)
			if err != nil {
				return
			}
			if len(got) == 0 {
				time.Sleep(time.Millisecond)
				continue
			}
			req := got[0]
			_, err = gateway.Publish(ctx, &pigeon.Message{Type: "payment.authorization.result", Subject: "payments.authorize",
				Intent: "authorize_payment", CorrelationID: req.ID, Classification: "pci", Data: json.RawMessage(`{"approved":true}`)})
			if err != nil {
				t.Errorf("reply: %v", err)
			}
			_ = gateway.Ack(ctx, "payments.authorize", req.ID)
			return
		}
	}()
	tctx, cancel := contextWithTimeout(30 * time.Second)
	defer cancel()
	reply, err := checkout.Request(tctx, demo.Payment("o-1"))
	require.NoError(t, err)
	require.JSONEq(t, `{"approved":true}`, string(reply.Data))
	require.Equal(t, demo.Gateway, reply.Source)
	wg.Wait()

	// A reply that nobody sends ends with REQUEST_TIMEOUT.
	short, cancel2 := contextWithTimeout(20 * time.Millisecond)
	defer cancel2()
	_, err = checkout.Request(short, demo.Payment("o-2"))
	requireCode(t, err, pigeon.CodeRequestTimeout)
	require.ErrorIs(t, err, pigeon.ErrTimeout)
}

func TestAuditChain(t *testing.T) {
	f := newFixture(t)
	s := f.connect("checkout-token", "payments.authorize")
	_, err := s.Publish(ctx, demo.Payment("o-1"))
	require.NoError(t, err)
	m := demo.Payment("o-2")
	m.Region = "us"
	_, err = s.Publish(ctx, m)
	require.Error(t, err)
	_, err = f.e.Connect(ctx, "catalog-token", []string{"payments.authorize"})
	require.Error(t, err)
	n, err := f.e.VerifyAudit(ctx)
	require.NoError(t, err)
	recs, err := f.e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(len(recs)), n)
	types := auditTypes(recs)
	for _, want := range []string{"schema.registered", "subject.registered", "contract.negotiated", "publish.accepted", "publish.denied", "quarantine.created", "contract.denied"} {
		require.Contains(t, types, want)
	}
	require.Equal(t, strings.Repeat("0", 64), recs[0].PrevHash)
	// Enriched: a denial names the gate, code, contract, policy and schema.
	for _, r := range recs {
		if r.Type == "publish.denied" {
			require.Equal(t, "REGION_DENIED", r.Code)
			require.Equal(t, pigeon.GateRegion, r.Gate)
			require.Equal(t, s.Contract().ID(), r.ContractID)
			require.Equal(t, "payments.authorize@v1", r.PolicyID)
			require.Equal(t, "payment.authorization.v1", r.SchemaID)
			require.Equal(t, demo.Checkout, r.Principal)
			require.NotEmpty(t, r.MessageID)
		}
	}
}

func TestAuditTamperDetected(t *testing.T) {
	f := newFixture(t)
	s := f.connect("checkout-token", "payments.authorize")
	for _, o := range []string{"o-1", "o-2", "o-3"} {
		_, err := s.Publish(ctx, demo.Payment(o))
		require.NoError(t, err)
	}
	recs, err := f.e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	tamper := []struct {
		name string
		fn   func([]pigeon.AuditRecord) []pigeon.AuditRecord
	}{
		{"altered", func(r []pigeon.AuditRecord) []pigeon.AuditRecord { r[3].Code = "X"; return r }},
		{"removed", func(r []pigeon.AuditRecord) []pigeon.AuditRecord { return append(r[:3], r[4:]...) }},
		{"reordered", func(r []pigeon.AuditRecord) []pigeon.AuditRecord { r[3], r[4] = r[4], r[3]; return r }},
		{"rehashed but unlinked", func(r []pigeon.AuditRecord) []pigeon.AuditRecord {
			r[3].Principal = "evil"
			r[3].Hash = r[3].ComputeHash()
			return r
		}},
	}
	for _, tc := range tamper {
		t.Run(tc.name, func(t *testing.T) {
			cp := append([]pigeon.AuditRecord(nil), recs...)
			err := verifyRecords(tc.fn(cp))
			require.Error(t, err)
		})
	}
	require.NoError(t, verifyRecords(recs))
}

func TestBadInputNeverLosesAccepted(t *testing.T) {
	f := newFixture(t)
	s := f.connect("checkout-token", "payments.authorize")
	_, err := s.Publish(ctx, demo.Payment("o-1"))
	require.NoError(t, err)
	_, err = s.Publish(ctx, nil)
	requireCode(t, err, pigeon.CodeEnvelopeInvalid)
	_, err = pigeon.DecodeMessage([]byte(`[1,2]`))
	requireCode(t, err, pigeon.CodeEnvelopeInvalid)
	_, err = pigeon.DecodeMessage([]byte(`{"subject": 5}`))
	requireCode(t, err, pigeon.CodeEnvelopeInvalid)
	gw := f.connect("gateway-token", "payments.authorize")
	got, err := gw.Receive(ctx, "payments.authorize", 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
}

func TestClosedSessionAndShutdown(t *testing.T) {
	f := newFixture(t)
	s := f.connect("checkout-token", "payments.authorize")
	require.NoError(t, s.Close(ctx))
	require.NoError(t, s.Close(ctx))
	_, err := s.Publish(ctx, demo.Payment("o"))
	requireCode(t, err, pigeon.CodeSessionClosed)
	require.True(t, errors.Is(err, pigeon.ErrClosed))
	require.NoError(t, f.e.Shutdown(ctx))
	require.NoError(t, f.e.Shutdown(ctx))
	_, err = f.e.Connect(ctx, "checkout-token", []string{"payments.authorize"})
	requireCode(t, err, pigeon.CodeShutdown)
}

func TestConcurrentPublishers(t *testing.T) {
	f := newFixture(t)
	const workers, each = 8, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := f.e.Connect(ctx, "checkout-token", []string{"payments.authorize"})
			if err != nil {
				t.Error(err)
				return
			}
			for i := range each {
				// Every worker also retries a shared key: exactly one wins.
				_, err := s.Publish(ctx, demo.Payment("shared"))
				if err != nil {
					t.Error(err)
				}
				_, err = s.Publish(ctx, demo.Payment(string(rune('A'+w))+"-"+itoa(i)))
				if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	gw := f.connect("gateway-token", "payments.authorize")
	got, err := gw.Receive(ctx, "payments.authorize", 1000)
	require.NoError(t, err)
	require.Len(t, got, workers*each+1)
	for i, m := range got {
		require.Equal(t, uint64(i+1), m.Sequence)
	}
	_, err = f.e.VerifyAudit(ctx)
	require.NoError(t, err)
}

func TestLoadCatalogRefusesInvalidPolicies(t *testing.T) {
	f := newFixture(t)
	base := func() pigeon.SubjectPolicy {
		return pigeon.SubjectPolicy{Name: "x.y", Version: "v1", Intents: []string{"i"},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: {{Effect: "allow"}}}}
	}
	tests := []struct {
		name   string
		mutate func(p *pigeon.SubjectPolicy)
	}{
		{"no name", func(p *pigeon.SubjectPolicy) { p.Name = "" }},
		{"no version", func(p *pigeon.SubjectPolicy) { p.Version = "" }},
		{"empty effect", func(p *pigeon.SubjectPolicy) { p.Policy[pigeon.OpPublish][0].Effect = "" }},
		{"bad effect", func(p *pigeon.SubjectPolicy) { p.Policy[pigeon.OpPublish][0].Effect = "maybe" }},
		{"unknown operation", func(p *pigeon.SubjectPolicy) { p.Policy["fly"] = []pigeon.RuleSpec{{Effect: "allow"}} }},
		{"bad mode", func(p *pigeon.SubjectPolicy) { p.Mode = "broadcast" }},
		{"unknown schema", func(p *pigeon.SubjectPolicy) { p.Schema = &pigeon.SchemaRef{Name: "nope"} }},
		{"CEL that does not compile", func(p *pigeon.SubjectPolicy) { p.Policy[pigeon.OpPublish][0].When = "message.data.x ==" }},
		{"CEL that is not bool", func(p *pigeon.SubjectPolicy) { p.Rules = []pigeon.QualityRule{{Name: "r", Expr: "message.region"}} }},
		{"bad onFailure", func(p *pigeon.SubjectPolicy) {
			p.Rules = []pigeon.QualityRule{{Name: "r", Expr: "true", OnFailure: "shrug"}}
		}},
		{"bad rate limit", func(p *pigeon.SubjectPolicy) { p.RateLimit = &pigeon.RateLimitPolicy{PerSecond: 0, Burst: 1} }},
		{"negative maxBytes", func(p *pigeon.SubjectPolicy) { p.Retention.MaxBytes = -1 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := base()
			tc.mutate(&p)
			err := f.e.ReplaceSubject(ctx, p)
			requireCode(t, err, pigeon.CodePolicyInvalid)
			_, err = f.e.Subject("x.y")
			requireCode(t, err, pigeon.CodeSubjectNotFound)
		})
	}
	require.NoError(t, f.e.ReplaceSubject(ctx, base()))

	// A schema given in Go, not read from a file, that reads two ways.
	p := base()
	p.Name, p.Schema = "x.z", &pigeon.SchemaRef{Name: "twice"}
	err := f.e.LoadCatalog(ctx, &pigeon.Catalog{Subjects: []pigeon.SubjectPolicy{p},
		Schemas: map[string][]byte{"twice": []byte(`{"type":"object","required":["amount"],"required":[]}`)}})
	requireCode(t, err, pigeon.CodePolicyInvalid)
	require.ErrorContains(t, err, "duplicate member name")
	_, err = f.e.Subject("x.z")
	requireCode(t, err, pigeon.CodeSubjectNotFound)
}

func TestIdempotencyKeyFromData(t *testing.T) {
	cat := demo.Catalog()
	for i := range cat.Subjects {
		if cat.Subjects[i].Name == "payments.authorize" {
			cat.Subjects[i].Delivery.Idempotency.Key = "data.orderId"
		}
	}
	f := newFixture(t, func(o *pigeon.Options) { o.Catalog = cat })
	s := f.connect("checkout-token", "payments.authorize")
	a := demo.Payment("o-1")
	a.IdempotencyKey = ""
	first, err := s.Publish(ctx, a)
	require.NoError(t, err, "the key comes from data.orderId, not the envelope")
	b := demo.Payment("o-1")
	b.IdempotencyKey = "something-else"
	dup, err := s.Publish(ctx, b)
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusDuplicate, dup.Status)
	require.Equal(t, first.Message.ID, dup.Message.ID)
	c := demo.Payment("o-2")
	c.Data = json.RawMessage(`{"merchantId":"m","amount":1,"currency":"GBP","paymentToken":"tok_1"}`)
	_, err = s.Publish(ctx, c)
	requireCode(t, err, pigeon.CodeIdempotencyRequired)
}

func TestTTLFromMillis(t *testing.T) {
	for _, tc := range []struct {
		ms   int64
		want time.Duration
		ok   bool
	}{
		{0, 0, true},
		{60000, time.Minute, true},
		{9223372036854, 9223372036854 * time.Millisecond, true}, // the largest that fits
		{9223372036855, 0, false},                               // overflows to a negative Duration
		{18446744073710, 0, false},                              // wraps to under a millisecond
		{math.MaxInt64, 0, false},
		{-1, 0, false},
		{math.MinInt64, 0, false},
	} {
		d, err := pigeon.TTLFromMillis(tc.ms)
		if !tc.ok {
			requireCode(t, err, pigeon.CodeInvalidArgument)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, d)
	}
}

// A ttl out of range is refused, never silently replaced by the default,
// clamped or wrapped around.
func TestContractAndGrantTTLRange(t *testing.T) {
	f := newFixture(t)
	p, err := f.e.Authenticate(ctx, "checkout-token")
	require.NoError(t, err)
	ms := int64(9223372036855)
	wrapped := time.Duration(ms) * time.Millisecond // what a raw ms conversion makes of it: negative
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		code pigeon.Code
	}{
		{"default", 0, pigeon.CodeOK},
		{"an hour", time.Hour, pigeon.CodeOK},
		{"the maximum", pigeon.DefaultMaxContractTTL, pigeon.CodeOK},
		{"above the maximum", pigeon.DefaultMaxContractTTL + time.Millisecond, pigeon.CodeInvalidArgument},
		{"negative", -time.Second, pigeon.CodeInvalidArgument},
		{"overflowed", wrapped, pigeon.CodeInvalidArgument},
	} {
		t.Run("contract "+tc.name, func(t *testing.T) {
			c, err := f.e.Negotiate(ctx, p, "", []string{"payments.authorize"}, tc.ttl)
			if tc.code != pigeon.CodeOK {
				requireCode(t, err, tc.code)
				return
			}
			require.NoError(t, err)
			want := tc.ttl
			if want == 0 {
				want = pigeon.DefaultContractTTL
			}
			require.Equal(t, want, c.ExpiresAt().Sub(c.Info().IssuedAt))
		})
	}
	_, err = f.e.CreateAccount(ctx, pigeon.Account{ID: "spiffe://x", Roles: []string{"r"}})
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		code pigeon.Code
	}{
		{"default", 0, pigeon.CodeOK},
		{"the maximum", pigeon.MaxGrantTTL, pigeon.CodeOK},
		{"above the maximum", pigeon.MaxGrantTTL + time.Second, pigeon.CodeInvalidArgument},
		{"negative", -time.Second, pigeon.CodeInvalidArgument},
		{"overflowed", wrapped, pigeon.CodeInvalidArgument},
	} {
		t.Run("grant "+tc.name, func(t *testing.T) {
			_, err := f.e.IssueGrant(ctx, "spiffe://x", []string{"r"}, tc.ttl)
			if tc.code != pigeon.CodeOK {
				requireCode(t, err, tc.code)
				return
			}
			require.NoError(t, err)
		})
	}
}

// listingStore is a store that can list its contracts (store.ContractLister).
type listingStore struct {
	store.Store
	mu   sync.Mutex
	recs map[string]store.ContractRecord
}

func (s *listingStore) PutContract(ctx context.Context, c store.ContractRecord) error {
	s.mu.Lock()
	s.recs[c.ID] = c
	s.mu.Unlock()
	return s.Store.PutContract(ctx, c)
}

func (s *listingStore) ListContracts(_ context.Context, after time.Time) ([]store.ContractRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.ContractRecord
	for _, r := range s.recs {
		if r.ExpiresAt.After(after) {
			out = append(out, r)
		}
	}
	return out, nil
}

// A principal holds at most MaxContractsPerPrincipal live contracts:
// revoking or expiring one frees its place, other principals are not
// affected, and contracts from before a restart count.
func TestContractsPerPrincipalCapped(t *testing.T) {
	st := &listingStore{Store: memory.New(nil), recs: map[string]store.ContractRecord{}}
	t.Cleanup(func() { _ = st.Close(ctx) })
	limits := func(o *pigeon.Options) {
		o.Store = st
		o.MaxContractsPerPrincipal = 3
		o.NegotiateRate = pigeon.RateLimitPolicy{PerSecond: -1}
	}
	f := newFixture(t, limits)
	p, err := f.e.Authenticate(ctx, "checkout-token")
	require.NoError(t, err)
	negotiate := func(e *pigeon.Engine, ttl time.Duration) (pigeon.Contract, error) {
		return e.Negotiate(ctx, p, "", []string{"payments.authorize"}, ttl)
	}
	var held []pigeon.Contract
	for range 3 {
		c, err := negotiate(f.e, time.Minute)
		require.NoError(t, err)
		held = append(held, c)
	}
	_, err = negotiate(f.e, time.Minute)
	pe := requireCode(t, err, pigeon.CodeTooManyContracts)
	require.Equal(t, http.StatusTooManyRequests, wire.HTTPStatus(pe.Code))
	other, err := f.e.Connect(ctx, "orders-token", []string{"notifications.send"})
	require.NoError(t, err, "another principal has its own count")
	require.NoError(t, other.Close(ctx))

	require.NoError(t, f.e.RevokeContract(ctx, p, held[0].ID()))
	require.NoError(t, f.e.RevokeContract(ctx, p, held[0].ID()), "revoking twice frees one place only")
	c, err := negotiate(f.e, 2*time.Minute)
	require.NoError(t, err, "revoking frees a place")
	held = append(held[1:], c)
	_, err = negotiate(f.e, time.Minute)
	requireCode(t, err, pigeon.CodeTooManyContracts)

	f.clock.Advance(time.Minute) // held[0] and held[1] expire
	for range 2 {
		_, err = negotiate(f.e, time.Hour)
		require.NoError(t, err, "expiring frees a place")
	}
	_, err = negotiate(f.e, time.Hour)
	requireCode(t, err, pigeon.CodeTooManyContracts)

	// After a restart on the same store, the live contracts still count.
	e2, err := pigeon.New(ctx, &pigeon.Options{Store: st, Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog(),
		Region: "uk", Now: f.clock.Now, MaxContractsPerPrincipal: 3, NegotiateRate: pigeon.RateLimitPolicy{PerSecond: -1}})
	require.NoError(t, err)
	defer e2.Shutdown(ctx)
	_, err = negotiate(e2, time.Minute)
	requireCode(t, err, pigeon.CodeTooManyContracts)
}

// A store that cannot list contracts counts one from before a restart as
// soon as it is used again.
func TestContractsCountedWhenRestoredLazily(t *testing.T) {
	mem := memory.New(nil)
	t.Cleanup(func() { _ = mem.Close(ctx) })
	st := struct{ store.Store }{mem} // hides store.ContractLister: counted on first use

	clk := newClock()
	open := func() *pigeon.Engine {
		e, err := pigeon.New(ctx, &pigeon.Options{Store: st, Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog(),
			Region: "uk", Now: clk.Now, MaxContractsPerPrincipal: 1})
		require.NoError(t, err)
		return e
	}
	e1 := open()
	p, err := e1.Authenticate(ctx, "checkout-token")
	require.NoError(t, err)
	c, err := e1.Negotiate(ctx, p, "", []string{"payments.authorize"}, time.Minute)
	require.NoError(t, err)
	require.NoError(t, e1.Shutdown(ctx))
	e2 := open()
	defer e2.Shutdown(ctx)
	_, err = e2.GetContract(ctx, p, c.ID())
	require.NoError(t, err)
	_, err = e2.Negotiate(ctx, p, "", []string{"payments.authorize"}, time.Minute)
	requireCode(t, err, pigeon.CodeTooManyContracts)
}

// Negotiation is rate-limited per principal with a token bucket.
func TestNegotiateRateLimited(t *testing.T) {
	f := newFixture(t, func(o *pigeon.Options) { o.NegotiateRate = pigeon.RateLimitPolicy{PerSecond: 1, Burst: 2} })
	for range 2 {
		f.connect("checkout-token", "payments.authorize")
	}
	_, err := f.e.Connect(ctx, "checkout-token", []string{"payments.authorize"})
	pe := requireCode(t, err, pigeon.CodeRateLimited)
	require.Equal(t, http.StatusTooManyRequests, wire.HTTPStatus(pe.Code))
	f.connect("orders-token", "notifications.send") // another principal has its own bucket
	f.clock.Advance(time.Second)
	f.connect("checkout-token", "payments.authorize")
	_, err = f.e.Connect(ctx, "checkout-token", []string{"payments.authorize"})
	requireCode(t, err, pigeon.CodeRateLimited)

	recs, err := f.e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(recs, func(r store.AuditRecord) bool {
		return r.Type == "contract.denied" && r.Code == string(pigeon.CodeRateLimited)
	}), "the refusal is audited")
}

// TestCatalogGeneration: the generation grows each time a catalog is made
// current, and only then: a refused catalog leaves it, and the catalog,
// as they were.
func TestCatalogGeneration(t *testing.T) {
	f := newFixture(t)
	g := f.e.CatalogGeneration()
	require.Equal(t, g, f.e.CatalogGeneration(), "stable while the catalog is")
	p, err := f.e.Subject("payments.authorize")
	require.NoError(t, err)
	p.Version = "v9"
	require.NoError(t, f.e.ReplaceSubject(ctx, p))
	require.Greater(t, f.e.CatalogGeneration(), g)
	g = f.e.CatalogGeneration()
	bad := p
	bad.Mode = "nope"
	require.Error(t, f.e.ReplaceSubject(ctx, bad))
	require.Equal(t, g, f.e.CatalogGeneration(), "a refused catalog changes nothing")
	got, err := f.e.Subject("payments.authorize")
	require.NoError(t, err)
	require.Equal(t, "v9", got.Version)
}
