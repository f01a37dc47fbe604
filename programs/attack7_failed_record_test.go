package programs_test

import (
	"context"
	"slices"
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
