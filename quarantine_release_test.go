package pigeon_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// A release that the gates refuse again leaves the message in its one
// quarantine record: it keeps no second copy, however often it is tried,
// and the refusal names the record the message stays in.
func TestFailedReleaseKeepsOneQuarantineRecord(t *testing.T) {
	f := newFixture(t)
	s, id := quarantinedPayment(t, f)
	c := s.(interface{ Caller() pigeon.Caller }).Caller()

	for range 3 {
		_, err := f.e.ReleaseQuarantine(ctx, c, id)
		pe := requireCode(t, err, pigeon.CodeSchemaInvalid)
		require.Equal(t, id, pe.Details["quarantineId"], "the message stays in its record")
	}
	recs, err := f.e.Quarantine(ctx, time.Time{}, 0)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, id, recs[0].ID)
	require.False(t, recs[0].Released)
}

// A released message goes into the subject's log through every gate,
// never as the reply to a request: on a request/reply subject, a
// quarantined message whose correlationId names a request stored since
// would otherwise reach the requester as its reply, past the gates a
// reply skips (rules, schema, data quality), under the releaser's name.
func TestReleasedMessageIsNeverAReply(t *testing.T) {
	f := accessFixture(t, func(o *pigeon.Options) {
		o.Catalog.Subjects = append(o.Catalog.Subjects, pigeon.SubjectPolicy{
			Name: "orders.lookup", Version: "v1", Mode: pigeon.ModeRequestReply, Intents: []string{"lookup"},
			Quarantine: pigeon.QuarantinePolicy{OnPolicyViolation: true, OnSchemaViolation: true},
			Rules:      []pigeon.QualityRule{{Name: "positive", Expr: "message.data.amount > 0", OnFailure: "quarantine"}},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{
				pigeon.OpPublish: {{Effect: "allow", Principals: []string{carol, dave}}},
				pigeon.OpReceive: {{Effect: "allow", Principals: []string{carol}}},
			},
		})
	})
	e := f.e
	msg := func(id, corr string, amount int) *pigeon.Message {
		b, _ := json.Marshal(map[string]int{"amount": amount})
		return &pigeon.Message{Type: "lookup", Intent: "lookup", Subject: "orders.lookup", ID: id, CorrelationID: corr, Data: b}
	}
	attacker := f.connect("dave-token", "orders.lookup")
	_, err := attacker.Publish(ctx, msg("", "req-1", -5))
	require.ErrorIs(t, err, pigeon.ErrQuarantined)
	var pe *pigeon.Error
	require.ErrorAs(t, err, &pe)
	qid := pe.Details["quarantineId"].(string)

	requester := f.connect("carol-token", "orders.lookup")
	_, err = requester.Publish(ctx, msg("req-1", "", 1))
	require.NoError(t, err)

	c := requester.(interface{ Caller() pigeon.Caller }).Caller()
	res, err := e.ReleaseQuarantine(ctx, c, qid)
	if err == nil {
		require.NotZero(t, res.Message.Sequence, "released as a reply to req-1, past the data-quality rule")
	}
	require.Error(t, err, "the data-quality rule refuses the released message again")
	rec, err := e.QuarantineRecord(ctx, qid)
	require.NoError(t, err)
	require.False(t, rec.Released)
}

// A release publishes under the releaser's own contract: a releaser whose
// contract does not hold publish on the subject cannot release, whatever
// the publisher could do, and the record stays open.
func TestReleaseNeedsTheReleasersOwnPublish(t *testing.T) {
	f := newFixture(t)
	_, id := quarantinedPayment(t, f)

	gateway := f.connect("gateway-token", "payments.authorize")
	_, err := f.e.ReleaseQuarantine(ctx, gateway.(interface{ Caller() pigeon.Caller }).Caller(), id)
	requireCode(t, err, pigeon.CodeOperationNotInContract)
	rec, err := f.e.QuarantineRecord(ctx, id)
	require.NoError(t, err)
	require.False(t, rec.Released)
	recs, err := f.e.Quarantine(ctx, time.Time{}, 0)
	require.NoError(t, err)
	require.Len(t, recs, 1)
}

// A release publishes as the releaser, whose idempotency keys are its
// own: two quarantined messages carrying one key (from one publisher, or
// two) released one after the other made the second a duplicate of the
// first, and its record was marked released though nothing of it was
// published. The second release is refused CONFLICT and its record stays
// open.
func TestReleaseAnsweredDuplicateKeepsItsRecordOpen(t *testing.T) {
	f := accessFixture(t, func(o *pigeon.Options) {
		o.Catalog.Subjects = append(o.Catalog.Subjects, reviewedOrders())
	})
	dave := f.connect("dave-token", "orders.place")
	var qids []string
	for _, amount := range []string{"500", "700"} {
		_, err := dave.Publish(ctx, &pigeon.Message{Type: "order", Intent: "place", Subject: "orders.place", IdempotencyKey: "k-1",
			Data: json.RawMessage(`{"amount":` + amount + `}`)})
		require.ErrorIs(t, err, pigeon.ErrQuarantined)
		var pe *pigeon.Error
		require.ErrorAs(t, err, &pe)
		qids = append(qids, pe.Details["quarantineId"].(string))
	}
	carol := f.connect("carol-token", "orders.place")
	c := carol.(interface{ Caller() pigeon.Caller }).Caller()
	first, err := f.e.ReleaseQuarantine(ctx, c, qids[0])
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusAccepted, first.Status)

	_, err = f.e.ReleaseQuarantine(ctx, c, qids[1])
	requireCode(t, err, pigeon.CodeConflict)
	rec, err := f.e.QuarantineRecord(ctx, qids[1])
	require.NoError(t, err)
	require.False(t, rec.Released, "nothing of it was published")
}

// quarantinedPayment publishes, as checkout, a payment without its token,
// which the schema gate refuses and quarantines; it returns the session
// and the quarantine record's id.
func quarantinedPayment(t *testing.T, f *fixture) (pigeon.Session, string) {
	t.Helper()
	s := f.connect("checkout-token", "payments.authorize")
	m := demo.Payment("o-1")
	m.Data = json.RawMessage(`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP"}`)
	_, err := s.Publish(ctx, m)
	pe := requireCode(t, err, pigeon.CodeSchemaInvalid)
	return s, pe.Details["quarantineId"].(string)
}

// reviewedOrders is orders.place, which carol and dave publish on; dave's
// orders above 100 are quarantined for another's release.
func reviewedOrders() pigeon.SubjectPolicy {
	return pigeon.SubjectPolicy{
		Name: "orders.place", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"place"},
		Rules: []pigeon.QualityRule{{Name: "review-large", Expr: `principal.id != "` + dave + `" || message.data.amount <= 100.0`, OnFailure: "quarantine"}},
		Policy: map[pigeon.Operation][]pigeon.RuleSpec{
			pigeon.OpPublish: {{Effect: "allow", Principals: []string{carol, dave}}},
		},
	}
}
