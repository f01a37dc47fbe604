package pigeon_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// TestDuplicateRecordNamesTheOriginalsSequence: a publish.duplicate record
// names the original by id and by sequence. An id names one message at a
// time only (retention frees a trimmed message's id), so the id alone
// cannot tell an auditor which message the repeat was answered with.
func TestDuplicateRecordNamesTheOriginalsSequence(t *testing.T) {
	f := newFixture(t)
	pub := f.connect("checkout-token", "payments.authorize")
	m := demo.Payment("o-1")
	m.IdempotencyKey = "k-1"
	first, err := pub.Publish(ctx, m)
	require.NoError(t, err)
	again := demo.Payment("o-1")
	again.IdempotencyKey = "k-1"
	dup, err := pub.Publish(ctx, again)
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusDuplicate, dup.Status)

	recs, err := f.e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	var got []pigeon.AuditRecord
	for _, r := range recs {
		if pigeon.Event(r.Type) == pigeon.EventPublishDuplicate {
			got = append(got, r)
		}
	}
	require.Len(t, got, 1)
	require.Equal(t, first.Message.ID, got[0].MessageID)
	require.Equal(t, strconv.FormatUint(first.Message.Sequence, 10), got[0].Seqs)
	require.NotEmpty(t, got[0].Ref, "the repeat's own id")
	require.NotEqual(t, first.Message.ID, got[0].Ref)
}
