package pigeon_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode"

	"pigeon/demo"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// cardDigits is the card number every test below spells, in one form
// or another.
const cardDigits = "4111111111111111"

// cardForms are spellings of cardDigits that the card-number gate
// recognises: plain, grouped by spaces or dashes, and by a no-break space
// and an en dash.
var cardForms = []string{
	cardDigits,
	"4111 1111 1111 1111",
	"4111-1111-1111-1111",
	"4111\u00a01111\u20131111 1111",
}

// digitsOf keeps the digits of s: a card number spelled with spaces or
// dashes, or escaped in JSON (\u00a0), is found again in it.
func digitsOf(s string) string {
	s = strings.NewReplacer(`\u00a0`, "", `\u2013`, "").Replace(s)
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		if unicode.IsSpace(r) || unicode.Is(unicode.Pd, r) {
			return -1
		}
		return 'x'
	}, s)
}

// requireNoCardNumber fails when the card number is anywhere in what the
// engine keeps for review: its audit log and its quarantine, and in the
// refusal err.
func requireNoCardNumber(t *testing.T, e *pigeon.Engine, err error) {
	t.Helper()
	recs, aerr := e.Audit(ctx, 0, 0)
	require.NoError(t, aerr)
	b, merr := json.Marshal(recs)
	require.NoError(t, merr)
	require.NotContains(t, digitsOf(string(b)), cardDigits, "the audit log")
	qs, qerr := e.Quarantine(ctx, time.Time{}, 0)
	require.NoError(t, qerr)
	b, merr = json.Marshal(qs)
	require.NoError(t, merr)
	require.NotContains(t, digitsOf(string(b)), cardDigits, "the quarantine")
	if err != nil {
		var pe *pigeon.Error
		require.ErrorAs(t, err, &pe)
		b, merr = json.Marshal(pe)
		require.NoError(t, merr)
		text := err.Error() + fmt.Sprintf(" %+v %s", pe.Details, b)
		if pe.Decision != nil {
			d, derr := json.Marshal(pe.Decision)
			require.NoError(t, derr)
			text += string(d)
		}
		require.NotContains(t, digitsOf(text), cardDigits, "the error")
	}
}

// panFixture is the access fixture with orders.place, a subject whose
// policy violations, and messages failing its quality rule, are
// quarantined.
func panFixture(t *testing.T) *fixture {
	return accessFixture(t, func(o *pigeon.Options) {
		o.Catalog.Subjects = append(o.Catalog.Subjects, pigeon.SubjectPolicy{
			Name: "orders.place", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"place"},
			Quarantine: pigeon.QuarantinePolicy{OnPolicyViolation: true},
			Rules:      []pigeon.QualityRule{{Name: "small", Expr: "message.data.amount <= 100.0", OnFailure: "quarantine"}},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{
				pigeon.OpPublish: {{Effect: "allow", Principals: []string{carol, dave}}},
			},
		})
	})
}

// A message id is written where data never is: the publish.denied and
// quarantine.created records and the quarantined copy name it, and a
// release publishes under it, so quarantine redaction left it alone. A
// publisher putting a card number there had it kept in clear in the
// quarantine and in the audit log, which is never rewritten. The id is now
// refused at the envelope (RAW_PAN_DETECTED), before the contract, no copy
// kept, and the refusal names it "[REDACTED]".
func TestCardNumberAsMessageIDIsRefusedAndNeverRecorded(t *testing.T) {
	for _, id := range cardForms {
		for _, amount := range []int{5, 500} { // 500: a quality failure, quarantined before
			t.Run(fmt.Sprintf("%q/%d", id, amount), func(t *testing.T) {
				f := panFixture(t)
				dave := f.connect("dave-token", "orders.place")
				_, err := dave.Publish(ctx, &pigeon.Message{ID: id, Type: "order", Intent: "place", Subject: "orders.place",
					Data: json.RawMessage(fmt.Sprintf(`{"amount":%d}`, amount))})
				pe := requireCode(t, err, pigeon.CodeRawPANDetected)
				require.NotErrorIs(t, err, pigeon.ErrQuarantined, "an envelope refusal keeps no copy")
				require.NotNil(t, pe.Decision)
				require.Equal(t, pigeon.Redacted, pe.Decision.MessageID)
				require.Equal(t, pigeon.GateEnvelope, pe.Decision.Gate)
				require.Equal(t, 1, auditCount(t, f.e, pigeon.EventPublishDenied, pigeon.CodeRawPANDetected))
				requireNoCardNumber(t, f.e, err)

				// In a batch too.
				pubs := f.e.PublishBatch(ctx, dave.(interface{ Caller() pigeon.Caller }).Caller(), []*pigeon.Message{
					{ID: id, Type: "order", Intent: "place", Subject: "orders.place", Data: json.RawMessage(`{"amount":500}`)},
				})
				require.Len(t, pubs, 1)
				requireCode(t, pubs[0].Err, pigeon.CodeRawPANDetected)
				requireNoCardNumber(t, f.e, pubs[0].Err)
			})
		}
	}
	t.Run("a number that is no card number is an id", func(t *testing.T) {
		f := panFixture(t)
		dave := f.connect("dave-token", "orders.place")
		res, err := dave.Publish(ctx, &pigeon.Message{ID: "4111111111111112", Type: "order", Intent: "place", Subject: "orders.place",
			Data: json.RawMessage(`{"amount":5}`)})
		require.NoError(t, err)
		require.Equal(t, "4111111111111112", res.Message.ID)
	})
}

// Every other text a client chooses that reaches the audit log or the
// quarantine: envelope fields a quarantined copy keeps, a subject it
// names that is not in the catalog (publish, negotiation), a quarantine
// record id it asks to release, a group name.
func TestOtherClientTextsKeepNoCardNumber(t *testing.T) {
	envelope := []struct {
		name string
		set  func(*pigeon.Message, string)
	}{
		{"idempotencyKey", func(m *pigeon.Message, p string) { m.IdempotencyKey = p }},
		{"correlationId", func(m *pigeon.Message, p string) { m.CorrelationID = p }},
		{"replyTo", func(m *pigeon.Message, p string) { m.ReplyTo = p }},
	}
	for _, pan := range cardForms {
		for _, tt := range envelope {
			t.Run(tt.name+"/"+pan, func(t *testing.T) {
				f := panFixture(t)
				dave := f.connect("dave-token", "orders.place")
				m := &pigeon.Message{Type: "order", Intent: "place", Subject: "orders.place", Data: json.RawMessage(`{"amount":500}`)}
				tt.set(m, pan)
				_, err := dave.Publish(ctx, m)
				require.ErrorIs(t, err, pigeon.ErrQuarantined)
				requireNoCardNumber(t, f.e, err)
			})
		}
		t.Run("subject/"+pan, func(t *testing.T) {
			f := panFixture(t)
			dave := f.connect("dave-token", "orders.place")
			_, err := dave.Publish(ctx, &pigeon.Message{Type: "order", Intent: "place", Subject: pan, Data: json.RawMessage(`{}`)})
			require.Error(t, err)
			requireNoCardNumber(t, f.e, err)

			_, err = f.e.Connect(ctx, "dave-token", []string{pan})
			require.Error(t, err)
			requireNoCardNumber(t, f.e, nil)
		})
		t.Run("release/"+pan, func(t *testing.T) {
			f := panFixture(t)
			_, err := f.e.ReleaseQuarantine(ctx, pigeon.Caller{Principal: &pigeon.Principal{ID: dave}}, pan)
			requireCode(t, err, pigeon.CodeQuarantineNotFound)
			require.Equal(t, 1, auditCount(t, f.e, pigeon.EventQuarantineReleased, pigeon.CodeQuarantineNotFound))
			requireNoCardNumber(t, f.e, err)
		})
	}
}

// A group's name is kept in the store, labels the metrics and is named by
// delivery.exhausted records: a card number is refused.
func TestCardNumberAsGroupNameIsRefused(t *testing.T) {
	f := newFixture(t)
	s := f.connect("notifier-token", "notifications.send")
	for _, pan := range cardForms {
		_, err := s.Subscribe(ctx, "notifications.send", nopHandler, pigeon.WithGroup(pan))
		requireCode(t, err, pigeon.CodeRawPANDetected)
		require.NotContains(t, digitsOf(err.Error()), cardDigits)
	}
	requireNoCardNumber(t, f.e, nil)
}

// A replay's reason and a work-queue subscription's selection (its
// selector and filter) are free text a client writes, and the audit log
// keeps them: the reason as a replay.executed record's reference, the
// selection inside the group key a delivery.exhausted record names. A card
// number written inside them was kept in clear, as the whole-value check
// (noPAN) never matched a longer text; now every card number inside them
// is "[REDACTED]", and the rest of the text stays.
func TestCardNumbersInsideClientTextsAreNotAudited(t *testing.T) {
	for _, pan := range cardForms {
		t.Run("replay reason/"+pan, func(t *testing.T) {
			f := newFixture(t)
			orders := f.connect("orders-token", "notifications.send")
			_, err := orders.Publish(ctx, demo.Notification("k-1"))
			require.NoError(t, err)
			ops := f.connect("notify-replay-token", "notifications.send")
			got, err := ops.Replay(ctx, pigeon.ReplayRequest{Subject: "notifications.send", Reason: "card " + pan + " disputed, ticket 42"})
			require.NoError(t, err)
			require.Len(t, got, 1)
			requireNoCardNumber(t, f.e, nil)
			ref := auditRefs(t, f.e, pigeon.EventReplayExecuted)
			require.Equal(t, []string{"card " + pigeon.Redacted + " disputed, ticket 42"}, ref)
		})
		t.Run("work-queue filter/"+pan, func(t *testing.T) {
			// Redeliveries 1, 2, 4, 8 ms apart; exhausted messages dropped,
			// so that the record names the group, not a quarantine record.
			f := newFixture(t, func(o *pigeon.Options) {
				o.Now = nil
				for i := range o.Catalog.Subjects {
					if o.Catalog.Subjects[i].Name == "notifications.send" {
						o.Catalog.Subjects[i].Quarantine.OnHandlerFailure = false
					}
				}
			})
			orders := f.connect("orders-token", "notifications.send")
			w := f.connect("notifier-token", "notifications.send")
			_, err := orders.Publish(ctx, demo.Notification("k-1"))
			require.NoError(t, err)
			_, err = w.Subscribe(ctx, "notifications.send", func(context.Context, *pigeon.Delivery) error {
				return errors.New("refused")
			}, pigeon.WithFilter(`message.data.channel != "`+pan+`"`))
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				return auditCount(t, f.e, pigeon.EventDeliveryExhausted, pigeon.CodeDeliveryExhausted) == 1
			}, 30*time.Second, 5*time.Millisecond)
			requireNoCardNumber(t, f.e, nil)
			ref := auditRefs(t, f.e, pigeon.EventDeliveryExhausted)
			require.Len(t, ref, 1)
			require.Contains(t, ref[0], `message.data.channel != "`+pigeon.Redacted+`"`)
		})
	}
	t.Run("numbers that are no card numbers stay", func(t *testing.T) {
		f := newFixture(t)
		orders := f.connect("orders-token", "notifications.send")
		_, err := orders.Publish(ctx, demo.Notification("k-1"))
		require.NoError(t, err)
		ops := f.connect("notify-replay-token", "notifications.send")
		reason := "orders 4111111111111112 and 1733000000000, 12345678901234567890123"
		_, err = ops.Replay(ctx, pigeon.ReplayRequest{Subject: "notifications.send", Reason: reason})
		require.NoError(t, err)
		require.Equal(t, []string{reason}, auditRefs(t, f.e, pigeon.EventReplayExecuted))
	})
}

// auditRefs is the reference of every audit record of ev, in order.
func auditRefs(t *testing.T, e *pigeon.Engine, ev pigeon.Event) []string {
	t.Helper()
	recs, err := e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	var refs []string
	for _, r := range recs {
		if r.Type == string(ev) {
			refs = append(refs, r.Ref)
		}
	}
	return refs
}
