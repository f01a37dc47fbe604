package pigeon_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestReceiptsTellAReusedIDApart: a client-chosen id is free again once
// its message is trimmed, so the audit log can hold two messages under
// one id; the receipts of the id name the message each delivery was of,
// by subject and sequence.
func TestReceiptsTellAReusedIDApart(t *testing.T) {
	f, _ := retentionFixture(t, 0, func(o *pigeon.Options) {
		for i, s := range o.Catalog.Subjects {
			if s.Name == "tasks.run" {
				o.Catalog.Subjects[i].Retention.MaxMessages = 1
			}
		}
	})
	boss, bob := f.connect("boss-token", "tasks.run"), f.connect("bob-token", "tasks.run")
	deliver := func(seq uint64) {
		m := task(int(seq))
		m.ID = "order-42"
		r, err := boss.Publish(ctx, m)
		require.NoError(t, err)
		require.Equal(t, seq, r.Message.Sequence)
		got, err := bob.Receive(ctx, "tasks.run", 1)
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.NoError(t, bob.Ack(ctx, "tasks.run", "order-42"))
	}
	deliver(1)
	publishTasks(t, boss, 2, 2) // the bound keeps this one alone
	_, err := bob.Receive(ctx, "tasks.run", 1)
	require.NoError(t, err)
	f.e.EnforceRetention(ctx)
	deliver(3) // the id is free again

	rs, err := f.e.Receipts(ctx, "order-42")
	require.NoError(t, err)
	var seqs []uint64
	for _, r := range rs {
		require.Equal(t, "tasks.run", r.Subject)
		seqs = append(seqs, r.Seq)
	}
	require.Equal(t, []uint64{1, 1, 3, 3}, seqs, "dispatched and acked, each message")
}
