package main

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// errStopped is the cause runLoad cancels a load with when its window is
// over.
var errStopped = errors.New("measurement window over")

// runLoad runs load until the window of c is over, and returns what each
// counter gained per second over the window: rate is the first counter,
// rate2 the second. If load fails first, runLoad returns its error.
func runLoad(ctx context.Context, c config, load func(context.Context) error, counters ...*atomic.Int64) (result, error) {
	lctx, cancel := context.WithCancelCause(ctx)
	done := make(chan error, 1)
	go func() {
		err := load(lctx)
		if err != nil && lctx.Err() == nil {
			cancel(err)
		}
		done <- err
	}()
	rates, werr := window(lctx, c, counters...)
	cancel(errStopped)
	<-done
	if werr != nil {
		if cause := context.Cause(lctx); cause != nil && !errors.Is(cause, errStopped) {
			return result{}, cause
		}
		return result{}, werr
	}
	r := result{rate: rates[0]}
	if len(rates) > 1 {
		r.rate2, r.has2 = rates[1], true
	}
	return r, nil
}

// workers runs op in a loop on n goroutines until ctx ends, and returns
// the first error op returned while ctx was live (nil when ctx ended it).
func workers(ctx context.Context, n int, op func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := op(ctx); err != nil {
					if ctx.Err() == nil {
						once.Do(func() { first = err; cancel() })
					}
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}
