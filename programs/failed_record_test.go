package programs_test

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
	"pigeon/store"
)

// A failed delivery's program.failed record never holds the delivery
// past the message's time (limits.timeoutMs): before, the delivery
// waited for the store's write of the record, so a slow durable or
// clustered store held the delivery, its place among route.maxInFlight
// and its nack (the redelivery, the quarantine) for as long as the write
// took. The record is not given up: once the store answers, it is there.
func TestProgramFailedRecordDoesNotHoldTheDelivery(t *testing.T) {
	st := newSlowStore()
	st.audit = func(recs []store.AuditRecord) bool {
		return slices.ContainsFunc(recs, func(r store.AuditRecord) bool { return r.Type == string(pigeon.EventProgramFailed) })
	}
	done := make(chan struct{}, 1)
	f := newFixture(t, st, returned(done))
	t.Cleanup(st.unblock) // before the fixture stops
	_, err := f.mg.Deploy(context.Background(), admin, "fail", manifest(func(m *programs.Manifest) { m.Limits.TimeoutMs = 50 }), modFail)
	require.NoError(t, err)
	f.publish(t, "orders.in", `{"n":1}`)
	within(t, st.entered, "the failure is never recorded")
	within(t, done, "the delivery waits for the store's write of its failure")
	st.unblock()
	eventually(t, func() bool {
		return slices.ContainsFunc(f.audited(t, pigeon.EventProgramFailed), func(r pigeon.AuditRecord) bool {
			return r.Ref == "program:fail@1" && r.Code == string(pigeon.CodeProgramTrapped)
		})
	}, "the failure is recorded once the store answers")
}

// A program.failed record names the message that failed by its sequence
// (Seqs) as well as its id, as the engine's records of one message do: a
// message id is the publisher's choice and, once retention freed it,
// names a newer message, so an auditor reading the id alone could not
// tell which message the program failed on.
func TestProgramFailedNamesTheSequence(t *testing.T) {
	f := newFixture(t, nil)
	_, err := f.mg.Deploy(context.Background(), admin, "fail", manifest(), modFail)
	require.NoError(t, err)
	want := map[string]string{}
	for i := range 2 {
		m := f.publish(t, "orders.in", `{"n":`+strconv.Itoa(i)+`}`)
		require.NotZero(t, m.Sequence)
		want[m.ID] = strconv.FormatUint(m.Sequence, 10)
	}
	eventually(t, func() bool { return len(f.quarantined(t, pigeon.CodeDeliveryExhausted)) == 2 }, "both deliveries are exhausted")
	rs := f.audited(t, pigeon.EventProgramFailed)
	require.Len(t, rs, 4, "two attempts each")
	for _, r := range rs {
		require.Contains(t, want, r.MessageID)
		require.Equal(t, want[r.MessageID], r.Seqs, "the record of message %s", r.MessageID)
	}
}
