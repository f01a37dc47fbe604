package transporttest

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

func testWorkQueueCompeting(t *testing.T, h Harness) {
	ctx := context.Background()
	boss := connect(t, h, "boss-token", "jobs.batch")
	var mu sync.Mutex
	seen := map[string]int{}
	var concurrent, peak int
	handler := func(ctx context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		seen[d.Message.ID]++
		concurrent++
		peak = max(peak, concurrent)
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		concurrent--
		mu.Unlock()
		return nil
	}
	for range 4 {
		crew := connect(t, h, "crew-token", "jobs.batch")
		_, err := crew.Subscribe(ctx, "jobs.batch", handler, pigeon.WithGroup("workers"), pigeon.WithMaxInFlight(2))
		require.NoError(t, err)
	}
	const n = 40
	for i := range n {
		m := job(i)
		m.Subject = "jobs.batch"
		_, err := boss.Publish(ctx, m)
		require.NoError(t, err)
	}
	eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == n }, "all jobs handled")
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for id, c := range seen {
		require.Equal(t, 1, c, "job %s delivered once", id)
	}
}

func testWorkQueueRedelivery(t *testing.T, h Harness) {
	ctx := context.Background()
	boss := connect(t, h, "boss-token", "jobs.run")
	crew := connect(t, h, "crew-token", "jobs.run")
	var mu sync.Mutex
	var attempts []int
	_, err := crew.Subscribe(ctx, "jobs.run", func(ctx context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, d.Attempt)
		if d.Attempt == 1 {
			return errors.New("transient")
		}
		return nil
	})
	require.NoError(t, err)
	_, err = boss.Publish(ctx, job(1))
	require.NoError(t, err)
	eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(attempts) == 2 }, "redelivered after a failure")
	time.Sleep(400 * time.Millisecond) // past the ack wait: an acked job never returns
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 2}, attempts)
}

func testWorkQueueExhausted(t *testing.T, h Harness) {
	ctx := context.Background()
	boss := connect(t, h, "boss-token", "jobs.run")
	crew := connect(t, h, "crew-token", "jobs.run")
	var mu sync.Mutex
	calls := 0
	_, err := crew.Subscribe(ctx, "jobs.run", func(ctx context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		calls++
		mu.Unlock()
		return errors.New("always fails")
	})
	require.NoError(t, err)
	res, err := boss.Publish(ctx, job(7))
	require.NoError(t, err)
	eventually(t, func() bool {
		q, err := h.Engine.Quarantine(ctx, time.Time{}, 0)
		return err == nil && len(q) == 1 && q[0].MessageID == res.Message.ID && q[0].Code == string(pigeon.CodeDeliveryExhausted)
	}, "exhausted job quarantined")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 3, calls, "maxAttempts deliveries")
}

func testHandlerPanic(t *testing.T, h Harness) {
	ctx := context.Background()
	boss := connect(t, h, "boss-token", "jobs.run")
	crew := connect(t, h, "crew-token", "jobs.run")
	var mu sync.Mutex
	var attempts []int
	_, err := crew.Subscribe(ctx, "jobs.run", func(ctx context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		attempts = append(attempts, d.Attempt)
		mu.Unlock()
		if d.Attempt == 1 {
			panic("handler bug")
		}
		return nil
	})
	require.NoError(t, err)
	_, err = boss.Publish(ctx, job(1))
	require.NoError(t, err)
	eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(attempts) == 2 }, "a panic nacks and the job comes back")
}

// testRetryAfter nacks with a delay longer than the backoff (10 ms) and the
// ack wait (300 ms): the next attempt must not come before it.
func testRetryAfter(t *testing.T, h Harness) {
	ctx := context.Background()
	boss := connect(t, h, "boss-token", "jobs.run")
	crew := connect(t, h, "crew-token", "jobs.run")
	var mu sync.Mutex
	var at []time.Time
	_, err := crew.Subscribe(ctx, "jobs.run", func(ctx context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		if d.Attempt == 1 {
			return pigeon.RetryAfter(700*time.Millisecond, errors.New("not yet"))
		}
		return nil
	})
	require.NoError(t, err)
	_, err = boss.Publish(ctx, job(1))
	require.NoError(t, err)
	eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(at) == 2 }, "redelivered after the delay")
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, at[1].Sub(at[0]), 650*time.Millisecond, "the asked delay is honoured (a lower bound, never an upper one)")
}

// testRetryAfterBeyondMax nacks with a delay far above
// pigeon.MaxRetryDelay: the nack is taken (shortened to the maximum), so
// the job is not back after the ack wait (300 ms), as it would be had the
// nack been refused.
func testRetryAfterBeyondMax(t *testing.T, h Harness) {
	ctx := context.Background()
	boss := connect(t, h, "boss-token", "jobs.run")
	crew := connect(t, h, "crew-token", "jobs.run")
	attempts := make(chan int, 4)
	_, err := crew.Subscribe(ctx, "jobs.run", func(ctx context.Context, d *pigeon.Delivery) error {
		attempts <- d.Attempt
		return pigeon.RetryAfter(1000*time.Hour, errors.New("much later"))
	})
	require.NoError(t, err)
	_, err = boss.Publish(ctx, job(1))
	require.NoError(t, err)
	select {
	case n := <-attempts:
		require.Equal(t, 1, n)
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	select {
	case n := <-attempts:
		t.Fatalf("attempt %d came within a second: the nack's delay was not kept", n)
	case <-time.After(time.Second):
	}
}

func testUnsubscribeReturnsLeases(t *testing.T, h Harness) {
	ctx := context.Background()
	boss := connect(t, h, "boss-token", "jobs.run")
	crew1 := connect(t, h, "crew-token", "jobs.run")
	crew2 := connect(t, h, "crew-token", "jobs.run")
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	sub1, err := crew1.Subscribe(ctx, "jobs.run", func(ctx context.Context, d *pigeon.Delivery) error {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return errors.New("gave up")
	})
	require.NoError(t, err)
	_, err = boss.Publish(ctx, job(1))
	require.NoError(t, err)
	<-started
	var got collector
	_, err = crew2.Subscribe(ctx, "jobs.run", got.handler)
	require.NoError(t, err)
	close(release)
	require.NoError(t, sub1.Unsubscribe(ctx))
	eventually(t, func() bool { return got.len() == 1 }, "the departed consumer's job goes to the other")
}

// testPullNackBeyondMax: a pull Nack, NackSequence or NackAttempt with a
// delay far above pigeon.MaxRetryDelay is taken by every transport's
// session (shortened to the maximum, as a push handler's RetryAfter is)
// and holds the job back: it is not received again after the ack wait
// (300 ms), as it would be had the nack been refused.
func testPullNackBeyondMax(t *testing.T, h Harness) {
	ctx := context.Background()
	boss := connect(t, h, "boss-token", "jobs.run")
	crew := connect(t, h, "crew-token", "jobs.run")
	settler, ok := crew.(pigeon.AttemptSettler)
	require.True(t, ok, "every transport's session settles by attempt")
	nacks := []func(m *pigeon.Message, attempt int) error{
		func(m *pigeon.Message, _ int) error { return crew.Nack(ctx, "jobs.run", m.ID, 1000*time.Hour) },
		func(m *pigeon.Message, _ int) error {
			return crew.(pigeon.SequenceSettler).NackSequence(ctx, "jobs.run", m.ID, m.Sequence, 1000*time.Hour)
		},
		func(m *pigeon.Message, a int) error {
			return settler.NackAttempt(ctx, "jobs.run", m.ID, m.Sequence, a, time.Duration(math.MaxInt64))
		},
	}
	for i, nack := range nacks {
		_, err := boss.Publish(ctx, job(i+1))
		require.NoError(t, err)
		msgs, attempts, err := settler.ReceiveAttempts(ctx, "jobs.run", 1)
		require.NoError(t, err)
		require.Len(t, msgs, 1)
		require.NoError(t, nack(msgs[0], attempts[0]), "nack %d", i)
	}
	time.Sleep(time.Second) // more than three ack waits: a refused nack's job would be back
	got, err := crew.Receive(ctx, "jobs.run", 10)
	require.NoError(t, err)
	require.Empty(t, got, "every nacked job is held back for the longest delay")
}
