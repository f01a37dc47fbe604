package server

import (
	"context"
	"log/slog"
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
	defer SetReadWait(20 * time.Millisecond)()
	ctx := context.Background()
	p := newReadPool(100, slog.New(slog.DiscardHandler))

	a, err := p.acquire(ctx, 60)
	require.NoError(t, err)
	require.EqualValues(t, 60, a)
	_, err = p.acquire(ctx, 50)
	require.Equal(t, pigeon.CodeRateLimited, pigeon.ErrorCode(err), "60 + 50 > 100")
	require.EqualValues(t, 60, p.inUse(), "a refused reservation holds nothing")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = p.acquire(cctx, 50)
	require.Equal(t, pigeon.CodeRequestTimeout, pigeon.ErrorCode(err))

	// A waiting reservation goes through once room is given back.
	got := make(chan error, 1)
	restore := SetReadWait(time.Minute)
	go func() {
		n, err := p.acquire(ctx, 50)
		if err == nil && n != 50 {
			err = pigeon.NewError(pigeon.CodeInternal, "reserved %d", n)
		}
		got <- err
	}()
	p.resize(a, 10) // the read kept 10 of its 60
	require.NoError(t, <-got)
	restore()
	require.EqualValues(t, 60, p.inUse())

	require.EqualValues(t, 80, p.resize(10, 80), "a read that has been made may pass the bound")
	require.EqualValues(t, 130, p.inUse())
	p.resize(80, 0)
	p.resize(50, 0)
	require.Zero(t, p.inUse())

	big, err := p.acquire(ctx, 1000)
	require.NoError(t, err)
	require.EqualValues(t, 100, big, "a read larger than the pool takes it all, alone")
	p.resize(big, 0)

	off := newReadPool(-1, slog.New(slog.DiscardHandler))
	n, err := off.acquire(ctx, 1<<40)
	require.NoError(t, err)
	require.Zero(t, n)
	require.EqualValues(t, 5, off.resize(n, 5))
	require.Zero(t, off.inUse())
	require.EqualValues(t, 2, p.refused.Load()+off.refused.Load())
}
