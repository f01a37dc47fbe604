package readpool

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestReadPool: reservations within the bound go through at once; one
// beyond it waits for room given back, and is refused RATE_LIMITED (or
// REQUEST_TIMEOUT when its context ends) when none comes; one larger than
// the pool is clamped to it and runs alone; a resize may pass the bound;
// without a bound nothing is counted.
func TestReadPool(t *testing.T) {
	ctx := context.Background()
	p := New(&Options{Limit: 100, Wait: 20 * time.Millisecond, LimitName: "MaxTest"})

	a, err := p.Reserve(ctx, alice, 60)
	require.NoError(t, err)
	require.EqualValues(t, 60, a)
	_, err = p.Reserve(ctx, alice, 50)
	require.Equal(t, pigeon.CodeRateLimited, pigeon.ErrorCode(err), "60 + 50 > 100")
	require.Contains(t, err.Error(), "MaxTest", "the refusal names the setting")
	var pe *pigeon.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, int64(1000), pe.Details["retryAfterMs"], "try again in a second")
	require.EqualValues(t, 60, p.InUse(), "a refused reservation holds nothing")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = p.Reserve(cctx, alice, 50)
	require.Equal(t, pigeon.CodeRequestTimeout, pigeon.ErrorCode(err))
	require.EqualValues(t, 2, p.Refused())

	// A waiting reservation goes through once room is given back.
	patient := New(&Options{Limit: 100, Wait: time.Minute, LimitName: "MaxTest"})
	a, err = patient.Reserve(ctx, alice, 60)
	require.NoError(t, err)
	got := make(chan int64, 1)
	go func() {
		n, err := patient.Reserve(ctx, alice, 50)
		if err != nil {
			n = -1
		}
		got <- n
	}()
	patient.Resize(alice, a, 10) // the read kept 10 of its 60
	require.EqualValues(t, 50, <-got)
	require.EqualValues(t, 60, patient.InUse())

	require.EqualValues(t, 80, patient.Resize(alice, 10, 80), "a read that has been made may pass the bound")
	require.EqualValues(t, 130, patient.InUse())
	patient.Resize(alice, 80, 0)
	patient.Resize(alice, 50, 0)
	require.Zero(t, patient.InUse())

	big, err := patient.Reserve(ctx, alice, 1000)
	require.NoError(t, err)
	require.EqualValues(t, 100, big, "a read larger than the pool takes it all, alone")
	patient.Resize(alice, big, 0)

	off := New(&Options{Limit: -1, Wait: time.Minute, LimitName: "MaxTest"})
	n, err := off.Reserve(ctx, alice, 1<<40)
	require.NoError(t, err)
	require.Zero(t, n)
	require.EqualValues(t, 5, off.Resize(alice, n, 5))
	require.Zero(t, off.InUse())
	require.Zero(t, off.Refused())
}

// TestMessagesCost counts each message's data twice and an envelope.
func TestMessagesCost(t *testing.T) {
	require.Zero(t, MessagesCost(nil))
	msgs := []*pigeon.Message{{Data: json.RawMessage(`{"a":1}`)}, {}}
	require.EqualValues(t, 2*7+1024+1024, MessagesCost(msgs))
}

// TestWaitersInOrder: waiting reads are served oldest first, each only
// once its room is taken for it, so a release wakes only the reads that
// fit; a read that arrives while others wait queues behind them even if
// it would fit; one that gives up lets the next through.
func TestWaitersInOrder(t *testing.T) {
	ctx := context.Background()
	p := New(&Options{Limit: 100, Wait: time.Minute, LimitName: "MaxTest"})
	all, err := p.Reserve(ctx, alice, 100)
	require.NoError(t, err)

	type got struct {
		name string
		n    int64
	}
	done := make(chan got, 4)
	wait := func(name string, n int64) {
		go func() {
			r, err := p.Reserve(ctx, alice, n)
			if err != nil {
				r = -1
			}
			done <- got{name, r}
		}()
	}
	queued := func(n int) {
		require.Eventually(t, func() bool {
			return waiting(p) == n
		}, 10*time.Second, time.Millisecond)
	}
	wait("a", 60)
	queued(1)
	wait("b", 60)
	queued(2)
	gone, cancel := context.WithCancel(ctx)
	quitter := make(chan error, 1)
	go func() { _, err := p.Reserve(gone, alice, 30); quitter <- err }()
	queued(3)

	p.Resize(alice, all, 0)
	require.Equal(t, got{"a", 60}, <-done, "the oldest first")
	require.EqualValues(t, 60, p.InUse(), "b does not fit beside a: not woken")
	cancel()
	require.Error(t, <-quitter)
	queued(1)
	p.Resize(alice, 60, 0)
	require.Equal(t, got{"b", 60}, <-done)
	wait("c", 10) // fits beside b
	require.Equal(t, got{"c", 10}, <-done)
	require.EqualValues(t, 70, p.InUse())
}
