package pigeon_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestPublishBatchOnMemoryKeepsPublishOrder: on the memory store a batch
// is appended under the store's lock in runs, and is recorded exactly as
// the same messages published one after another: the same answers, the
// same sequences, and the same audit records in the same order (each
// refusal and duplicate after the acceptances before it, every
// acceptance in its message's place), ids "aud_" and the sequence, times
// in UTC, a chain that verifies.
func TestPublishBatchOnMemoryKeepsPublishOrder(t *testing.T) {
	inputs := batchInputs()
	for range 20 { // past one run of the memory store's batches
		inputs = append(inputs, batchInputs()[0]) // duplicates of o-1 among them
	}
	for i := range 20 {
		m := batchInputs()[2]
		m.IdempotencyKey = "o-run-" + string(rune('a'+i))
		inputs = append(inputs, m)
	}

	one := newFixture(t)
	oneSession := one.connect("checkout-token", "payments.authorize")
	var want []pigeon.Published
	for _, m := range inputs {
		res, err := one.e.Publish(ctx, callerOf(oneSession), m)
		want = append(want, pigeon.Published{Result: res, Err: err})
	}

	batch := newFixture(t)
	batchSession := batch.connect("checkout-token", "payments.authorize")
	got := batch.e.PublishBatch(ctx, callerOf(batchSession), inputs)
	require.Len(t, got, len(want))
	for i := range want {
		if want[i].Err != nil {
			require.Equal(t, pigeon.ErrorCode(want[i].Err), pigeon.ErrorCode(got[i].Err), "message %d: %v", i, got[i].Err)
			continue
		}
		require.NoError(t, got[i].Err, "message %d", i)
		require.Equal(t, want[i].Result.Status, got[i].Result.Status, "message %d", i)
		require.Equal(t, want[i].Result.Message.Sequence, got[i].Result.Message.Sequence, "message %d", i)
	}

	type entry struct{ Type, Outcome, Code, Gate, Subject, Seqs, ID string }
	records := func(e *pigeon.Engine) []entry {
		_, err := e.VerifyAudit(ctx)
		require.NoError(t, err)
		recs, err := e.Audit(ctx, 0, 0)
		require.NoError(t, err)
		var out []entry
		for i, r := range recs {
			require.Equal(t, uint64(i+1), r.Seq)
			require.Equal(t, "aud_"+strconv.FormatUint(r.Seq, 10), r.ID)
			require.Equal(t, r.Time.UTC(), r.Time)
			out = append(out, entry{r.Type, r.Outcome, r.Code, r.Gate, r.Subject, r.Seqs, r.ID})
		}
		return out
	}
	require.Equal(t, records(one.e), records(batch.e))
}
