package pigeon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
	"pigeon/store/memory"
)

// A quarantine record redacts every raw card number whatever the field
// that carries it: a publisher that puts one in the envelope's type,
// region, classification or signature, fields no gate reads for card
// numbers, must not see it kept in clear for every reviewer of the
// quarantine to read.
func TestQuarantineRedactsCardNumbersInEveryEnvelopeField(t *testing.T) {
	const pan = "4111 1111 1111 1111"
	tests := []struct {
		name string
		set  func(*pigeon.Message)
		get  func(*pigeon.Message) string
	}{
		{"intent", func(m *pigeon.Message) { m.Intent = pan }, func(m *pigeon.Message) string { return m.Intent }},
		{"type", func(m *pigeon.Message) { m.Type = pan }, func(m *pigeon.Message) string { return m.Type }},
		{"region", func(m *pigeon.Message) { m.Region = pan }, func(m *pigeon.Message) string { return m.Region }},
		{"classification", func(m *pigeon.Message) { m.Classification = pan }, func(m *pigeon.Message) string { return m.Classification }},
		{"signature.kid", func(m *pigeon.Message) { m.Signature = &pigeon.Signature{KID: pan, Alg: "EdDSA", Sig: "x"} }, func(m *pigeon.Message) string { return m.Signature.KID }},
		{"signature.sig", func(m *pigeon.Message) {
			m.Signature = &pigeon.Signature{KID: "k", Alg: "EdDSA", Sig: "4111111111111111"}
		}, func(m *pigeon.Message) string { return m.Signature.Sig }},
		{"signature.alg", func(m *pigeon.Message) { m.Signature = &pigeon.Signature{KID: "k", Alg: pan, Sig: "x"} }, func(m *pigeon.Message) string { return m.Signature.Alg }},
		{"reason", func(m *pigeon.Message) { m.Reason = pan }, func(m *pigeon.Message) string { return m.Reason }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := accessFixture(t, func(o *pigeon.Options) {
				o.Catalog.Subjects = append(o.Catalog.Subjects, pigeon.SubjectPolicy{
					Name: "orders.place", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"place"},
					Quarantine: pigeon.QuarantinePolicy{OnPolicyViolation: true},
					Rules:      []pigeon.QualityRule{{Name: "small", Expr: "message.data.amount <= 100.0", OnFailure: "quarantine"}},
					Policy: map[pigeon.Operation][]pigeon.RuleSpec{
						pigeon.OpPublish: {{Effect: "allow", Principals: []string{carol, dave}}},
					},
				})
			})
			dave := f.connect("dave-token", "orders.place")
			m := &pigeon.Message{Type: "order", Intent: "place", Subject: "orders.place", Data: json.RawMessage(`{"amount":500}`)}
			tt.set(m)
			_, err := dave.Publish(ctx, m)
			require.ErrorIs(t, err, pigeon.ErrQuarantined)
			var pe *pigeon.Error
			require.ErrorAs(t, err, &pe)
			rec, err := f.e.QuarantineRecord(ctx, pe.Details["quarantineId"].(string))
			require.NoError(t, err)
			require.NotNil(t, rec.Message)
			require.Equal(t, pigeon.Redacted, tt.get(rec.Message))
			require.NotContains(t, string(rec.Body), "4111")
		})
	}
}

// releaseFailingStore is a memory store that refuses to write a
// quarantine record marked released while fail is set.
type releaseFailingStore struct {
	store.Store
	fail atomic.Bool
}

func (s *releaseFailingStore) PutQuarantine(ctx context.Context, r store.QuarantineRecord) error {
	if r.Released && s.fail.Load() {
		return fmt.Errorf("disk on fire: %w", store.ErrFull)
	}
	return s.Store.PutQuarantine(ctx, r)
}

// A release whose message was published is on the record even when the
// quarantine record could not be marked released: the message is in the
// subject's log, under the releaser's name, and the audit log says who
// let it out, from which record.
func TestReleasePublishedIsAuditedWhenTheRecordCannotBeMarked(t *testing.T) {
	st := &releaseFailingStore{Store: memory.New(nil)}
	t.Cleanup(func() { _ = st.Close(ctx) })
	f := accessFixture(t, func(o *pigeon.Options) {
		o.Store = st
		o.Catalog.Subjects = append(o.Catalog.Subjects, reviewedOrders())
	})
	dave := f.connect("dave-token", "orders.place")
	_, err := dave.Publish(ctx, &pigeon.Message{Type: "order", Intent: "place", Subject: "orders.place", Data: json.RawMessage(`{"amount":500}`)})
	require.ErrorIs(t, err, pigeon.ErrQuarantined)
	var pe *pigeon.Error
	require.ErrorAs(t, err, &pe)
	qid := pe.Details["quarantineId"].(string)
	rec, err := f.e.QuarantineRecord(ctx, qid)
	require.NoError(t, err)

	st.fail.Store(true)
	carol := f.connect("carol-token", "orders.place")
	_, err = f.e.ReleaseQuarantine(ctx, carol.(interface{ Caller() pigeon.Caller }).Caller(), qid)
	requireCode(t, err, pigeon.CodeStoreFull)
	_, err = st.Lookup(ctx, rec.MessageID)
	require.NoError(t, err, "the message was published")

	released := auditOf(t, f.e, pigeon.EventQuarantineReleased)
	require.Len(t, released, 1, "the release that published it is on the record")
	require.Equal(t, string(pigeon.OutcomeAllow), released[0].Outcome)
	require.Equal(t, qid, released[0].Ref)
	require.Equal(t, rec.MessageID, released[0].MessageID)
	require.Equal(t, carol.(interface{ Caller() pigeon.Caller }).Caller().Principal.ID, released[0].Principal)
}

// quarantineFailingStore is a memory store that refuses every new
// quarantine record while fail is set.
type quarantineFailingStore struct {
	store.Store
	fail atomic.Bool
}

func (s *quarantineFailingStore) PutQuarantine(ctx context.Context, r store.QuarantineRecord) error {
	if s.fail.Load() {
		return fmt.Errorf("disk on fire: %w", store.ErrFull)
	}
	return s.Store.PutQuarantine(ctx, r)
}

// The publish.denied record of a message the policy quarantines says
// "quarantine" before the copy is written; when the store then fails to
// keep it, the log says so too (quarantine.created refused with the
// store's code), rather than leave an auditor looking for a quarantine
// record that was never made.
func TestQuarantineTheStoreCannotKeepIsOnTheRecord(t *testing.T) {
	st := &quarantineFailingStore{Store: memory.New(nil)}
	t.Cleanup(func() { _ = st.Close(ctx) })
	f := newFixture(t, func(o *pigeon.Options) { o.Store = st })
	s := f.connect("checkout-token", "payments.authorize")
	leaky := demo.Payment("o-1")
	leaky.Region = "us"

	st.fail.Store(true)
	_, err := s.Publish(ctx, leaky)
	pe := requireCode(t, err, pigeon.CodeRegionDenied)
	require.NotContains(t, pe.Details, "quarantineId")

	denied := auditOf(t, f.e, pigeon.EventPublishDenied)
	require.Len(t, denied, 1)
	created := auditOf(t, f.e, pigeon.EventQuarantineCreated)
	require.Len(t, created, 1, "the failed quarantine is on the record")
	require.Equal(t, string(pigeon.OutcomeDeny), created[0].Outcome)
	require.Equal(t, string(pigeon.CodeStoreFull), created[0].Code)
	require.Equal(t, denied[0].MessageID, created[0].MessageID)
	require.Empty(t, created[0].Ref, "no record was made")
}

// A quarantine record is released once: releases of one record at once
// (a double click, two reviewers) published it once but each answered
// accepted and wrote its own quarantine.released allow record, since each
// read the record open before any marked it. Every release after the
// first, at once or later, is refused BAD_REQUEST, and every refused
// release is on the record, an unknown record's too.
func TestQuarantineIsReleasedOnceAndRefusalsAreAudited(t *testing.T) {
	f := accessFixture(t, func(o *pigeon.Options) {
		o.Catalog.Subjects = append(o.Catalog.Subjects, reviewedOrders())
	})
	dave := f.connect("dave-token", "orders.place")
	_, err := dave.Publish(ctx, &pigeon.Message{Type: "order", Intent: "place", Subject: "orders.place", IdempotencyKey: "k-1", Data: json.RawMessage(`{"amount":500}`)})
	require.ErrorIs(t, err, pigeon.ErrQuarantined)
	var pe *pigeon.Error
	require.ErrorAs(t, err, &pe)
	qid := pe.Details["quarantineId"].(string)

	c := f.connect("carol-token", "orders.place").(interface{ Caller() pigeon.Caller }).Caller()
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { _, errs[i] = f.e.ReleaseQuarantine(ctx, c, qid) })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
			continue
		}
		requireCode(t, err, pigeon.CodeBadRequest)
	}
	require.Equal(t, 1, ok, "released once")

	_, err = f.e.ReleaseQuarantine(ctx, c, "qr_unknown")
	requireCode(t, err, pigeon.CodeQuarantineNotFound)

	var allowed, refused int
	for _, r := range auditOf(t, f.e, pigeon.EventQuarantineReleased) {
		switch r.Outcome {
		case string(pigeon.OutcomeAllow):
			allowed++
			require.Equal(t, qid, r.Ref)
		case string(pigeon.OutcomeDeny):
			refused++
			require.Equal(t, c.Principal.ID, r.Principal)
		}
	}
	require.Equal(t, 1, allowed, "one release let it out")
	require.Equal(t, n, refused, "every refused release is on the record, the unknown record's too")
}
