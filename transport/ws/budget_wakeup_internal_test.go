package ws

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A reservation that waits on the server's budget (full with a slow
// connection's frames) while its own connection has a frame being written
// must get its room once that frame is given back: the connection then
// has nothing queued, and may always queue one frame. unreserve gives the
// server's bytes back first, then the connection's; a waiter woken by the
// first that looked again before the second found its connection still
// holding bytes, waited on the server's budget again, and was never woken:
// the slow connection gives nothing back. The healthy reader's deliveries
// stopped until the stall timeout, which then dropped it as stalled
// (TestSlowSubscribersStayWithinTheWriteBudgets/per_server timed out so
// once in a clean-clone CI run).
func TestReserveWakesWhenItsConnectionEmpties(t *testing.T) {
	const n = 1000
	srv := &Server{opts: Options{StallTimeout: time.Hour}}
	srv.budget = budget{limit: 2 * n}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow := &conn{srv: srv, ctx: ctx}
	slow.budget = budget{limit: 4 * n}
	healthy := &conn{srv: srv, ctx: ctx}
	healthy.budget = budget{limit: 4 * n}

	require.True(t, slow.tryReserve(2*n), "the slow connection fills the server's budget")
	require.True(t, healthy.tryReserve(n), "the healthy one's frame in flight (its first, so let through)")

	done := make(chan error, 1)
	go func() { done <- healthy.reserve(ctx, n) }()
	waiting := func(b *budget) func() bool {
		return func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.freed != nil }
	}
	require.Eventually(t, waiting(&srv.budget), 5*time.Second, time.Millisecond, "the reservation waits on the server")

	// unreserve of the frame in flight, in its two steps, with the waiter
	// looking again in between.
	srv.budget.give(n)
	require.Eventually(t, waiting(&srv.budget), 5*time.Second, time.Millisecond, "the waiter looked again and waits")
	healthy.budget.give(n)

	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the reservation still waits, though its connection has nothing queued")
	}
}
