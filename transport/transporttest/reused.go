package transporttest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// reusedID publishes job n on jobs.batch under the id job-x and returns
// its sequence.
func reusedID(t *testing.T, boss pigeon.Session, n int) uint64 {
	t.Helper()
	m := job(n)
	m.ID, m.Subject = "job-x", "jobs.batch"
	r, err := boss.Publish(context.Background(), m)
	require.NoError(t, err)
	require.Equal(t, "accepted", r.Status)
	require.Equal(t, "job-x", r.Message.ID)
	return r.Message.Sequence
}

// testReusedIDPull: a message id names one message at a time only. Once
// retention trimmed the message job-x a consumer pulled, and a newer
// message took its id, the consumer's late answer naming the first
// message's sequence settles nothing: the newer one stays leased to it
// until an answer names its own sequence. Every session acks and nacks
// by sequence (pigeon.SequenceSettler).
func testReusedIDPull(t *testing.T, h Harness) {
	if h.Trim == nil {
		t.Skip("the harness cannot trim its store")
	}
	ctx := context.Background()
	boss := connect(t, h, "boss-token", "jobs.batch")
	crew := connect(t, h, "crew-token", "jobs.batch")
	settler, ok := crew.(pigeon.SequenceSettler)
	require.True(t, ok, "the session acks and nacks by sequence (pigeon.SequenceSettler)")

	first := reusedID(t, boss, 1)
	got, err := crew.Receive(ctx, "jobs.batch", 5)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, first, got[0].Sequence)
	require.NoError(t, h.Trim(ctx, "jobs.batch", first))
	second := reusedID(t, boss, 2)
	require.NotEqual(t, first, second, "a sequence is never reused")
	got, err = crew.Receive(ctx, "jobs.batch", 5)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "job-x", got[0].ID)
	require.Equal(t, second, got[0].Sequence, "the message carries the sequence it was received at")

	requireCode(t, settler.AckSequence(ctx, "jobs.batch", "job-x", first), pigeon.CodeAckNotAllowed)
	requireCode(t, settler.NackSequence(ctx, "jobs.batch", "job-x", first, 0), pigeon.CodeAckNotAllowed)
	got, err = crew.Receive(ctx, "jobs.batch", 5)
	require.NoError(t, err)
	require.Empty(t, got, "the newer job-x is still leased: the late answers settled nothing")

	require.NoError(t, settler.NackSequence(ctx, "jobs.batch", "job-x", second, 0))
	var again []*pigeon.Message
	eventually(t, func() bool {
		again, err = crew.Receive(ctx, "jobs.batch", 5)
		return err != nil || len(again) > 0
	}, "the nack of the newer job-x gives it back")
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Equal(t, second, again[0].Sequence)
	require.NoError(t, settler.AckSequence(ctx, "jobs.batch", "job-x", second))
	requireCode(t, settler.AckSequence(ctx, "jobs.batch", "job-x", first), pigeon.CodeAckNotAllowed)
}

// testReusedIDPush: a subscriber still handling job-x when retention
// trims it and a newer message takes its id gets the newer one as
// another delivery, at its own sequence. The first handler's late
// success settles the first delivery only: the newer one's failure
// still gives it back, and it comes again, at its sequence.
func testReusedIDPush(t *testing.T, h Harness) {
	if h.Trim == nil {
		t.Skip("the harness cannot trim its store")
	}
	ctx := context.Background()
	boss := connect(t, h, "boss-token", "jobs.batch")
	crew := connect(t, h, "crew-token", "jobs.batch")
	type handed struct {
		seq     uint64
		attempt int
	}
	var (
		deliveries = make(chan handed, 8)
		// The first delivery of each job-x waits for its release.
		release = [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	)
	_, err := crew.Subscribe(ctx, "jobs.batch", func(ctx context.Context, d *pigeon.Delivery) error {
		deliveries <- handed{d.Message.Sequence, d.Attempt}
		if d.Attempt > 1 {
			return nil
		}
		// Which job-x a handler holds is told by its data, not by the
		// order handlers start in: the two may run at once (WithMaxInFlight),
		// and the newer one's handler may go on before the first one's.
		var job struct{ N int }
		if err := json.Unmarshal(d.Message.Data, &job); err != nil || job.N < 1 || job.N > 2 {
			return errors.New("not one of the two jobs")
		}
		i := job.N - 1
		select {
		case <-release[i]:
		case <-ctx.Done():
			return ctx.Err()
		}
		if i == 1 {
			return pigeon.RetryAfter(0, errors.New("the newer job fails once"))
		}
		return nil
	}, pigeon.WithGroup("crew"), pigeon.WithMaxInFlight(2))
	require.NoError(t, err)

	next := func() handed {
		t.Helper()
		select {
		case d := <-deliveries:
			return d
		case <-time.After(10 * time.Second):
			t.Fatal("no delivery came")
			return handed{}
		}
	}
	s1 := reusedID(t, boss, 1)
	require.Equal(t, handed{s1, 1}, next())
	require.NoError(t, h.Trim(ctx, "jobs.batch", s1))
	s2 := reusedID(t, boss, 2)
	// The first handler succeeds late, after the newer job-x took the id
	// (a session may hold the newer delivery back until the handler of
	// the first returns: one id's handler runs once at a time).
	close(release[0])
	require.Equal(t, handed{s2, 1}, next(), "the newer job-x is another delivery, at its own sequence")
	close(release[1]) // the newer one fails
	require.Equal(t, handed{s2, 2}, next(), "the newer job-x comes again: the late success did not settle it")
}
