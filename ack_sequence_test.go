package pigeon_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// oneMessageTasks keeps one message of tasks.run: publishing another
// lets retention trim the one before, freeing its id.
func oneMessageTasks(o *pigeon.Options) {
	for i, s := range o.Catalog.Subjects {
		if s.Name == "tasks.run" {
			o.Catalog.Subjects[i].Retention.MaxMessages = 1
		}
	}
}

// publishTask publishes task n as s under message id id and returns its
// sequence.
func publishTask(t *testing.T, s pigeon.Session, n int, id string) uint64 {
	t.Helper()
	m := task(n)
	m.ID = id
	r, err := s.Publish(ctx, m)
	require.NoError(t, err)
	return r.Message.Sequence
}

// reusedLease leaves bob holding, under lease, the message published as
// id at sequence 3, after he had received the message first published
// under id, at sequence 1, which retention then trimmed: his answer to
// that first delivery comes late. It returns bob's session.
func reusedLease(t *testing.T, id string) pigeon.Session {
	t.Helper()
	f, _ := retentionFixture(t, 0, oneMessageTasks)
	boss, bob := f.connect("boss-token", "tasks.run"), f.connect("bob-token", "tasks.run")
	publish := func(n int, id string) uint64 { return publishTask(t, boss, n, id) }
	require.Equal(t, uint64(1), publish(1, id))
	got, err := bob.Receive(ctx, "tasks.run", 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, uint64(1), got[0].Sequence)
	require.Equal(t, uint64(2), publish(2, "other"))
	f.e.EnforceRetention(ctx) // trims sequence 1, bob's lease of it with it
	require.Equal(t, uint64(3), publish(3, id), "the id is free again")
	got, err = bob.Receive(ctx, "tasks.run", 5)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, id, got[1].ID)
	require.Equal(t, uint64(3), got[1].Sequence)
	return bob
}

// TestLateAnswerDoesNotSettleAReusedID: an ack or a nack naming the
// sequence a consumer received a message at settles only that delivery.
// Once the message is trimmed and a newer one published under its id,
// the late answer is ACK_NOT_ALLOWED and the newer message, leased to the
// same consumer, stays leased and unsettled: it is neither done (an ack
// would lose it) nor given back (a nack would hand it out twice).
func TestLateAnswerDoesNotSettleAReusedID(t *testing.T) {
	cases := []struct {
		name   string
		answer func(s pigeon.SequenceSettler) error
	}{
		{"Ack", func(s pigeon.SequenceSettler) error { return s.AckSequence(ctx, "tasks.run", "order-7", 1) }},
		{"Nack", func(s pigeon.SequenceSettler) error { return s.NackSequence(ctx, "tasks.run", "order-7", 1, 0) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bob := reusedLease(t, "order-7")
			settler, ok := bob.(pigeon.SequenceSettler)
			require.True(t, ok, "the in-process session settles by sequence")
			requireCode(t, c.answer(settler), pigeon.CodeAckNotAllowed)

			got, err := bob.Receive(ctx, "tasks.run", 5)
			require.NoError(t, err)
			require.Empty(t, got, "the newer message is still leased to bob")
			// Given back at once by its own sequence, it comes again:
			// the late answer settled nothing.
			require.NoError(t, settler.NackSequence(ctx, "tasks.run", "order-7", 3, 0))
			got, err = bob.Receive(ctx, "tasks.run", 5)
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Equal(t, uint64(3), got[0].Sequence)
			require.NoError(t, settler.AckSequence(ctx, "tasks.run", "order-7", 3))
		})
	}
}

// TestAckSequenceZeroIsAck: a sequence of 0 names none, as Ack and Nack,
// which settle the message holding the id now.
func TestAckSequenceZeroIsAck(t *testing.T) {
	bob := reusedLease(t, "order-8")
	settler := bob.(pigeon.SequenceSettler)
	require.NoError(t, settler.NackSequence(ctx, "tasks.run", "order-8", 0, 0))
	got, err := bob.Receive(ctx, "tasks.run", 5)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.NoError(t, settler.AckSequence(ctx, "tasks.run", "order-8", 0))
	require.NoError(t, bob.Ack(ctx, "tasks.run", "order-8"), "acking twice is a no-op")
	require.NoError(t, bob.Nack(ctx, "tasks.run", "order-8", time.Duration(-1)), "a nack of what is done does nothing")
}
