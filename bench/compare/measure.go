package main

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// config is what every scenario is given.
type config struct {
	// warmup runs the load before counting starts; duration is the window
	// counted.
	warmup, duration time.Duration
	// repeat is how many times each scenario runs; the table keeps the
	// middle run (see middle).
	repeat int
}

// result is one scenario's measurement. Throughput scenarios set rate
// (and rate2 when they count two things); latency scenarios set p50 and
// p99. note says anything the reader needs to judge the number.
type result struct {
	rate, rate2 float64
	has2        bool // rate2 was measured
	p50, p99    time.Duration
	samples     int
	note        string
}

// firstMoveTimeout bounds the wait for a load's first message.
const firstMoveTimeout = 30 * time.Second

// errNothingMoved says a load moved no message in firstMoveTimeout.
var errNothingMoved = errors.New("no message moved in " + firstMoveTimeout.String())

// window waits until every counter has moved, lets the load run for
// c.warmup, then counts what each counter gained over c.duration and
// returns it per second, in counter order. It returns ctx.Err() if ctx
// ends first.
func window(ctx context.Context, c config, counters ...*atomic.Int64) ([]float64, error) {
	if err := moving(ctx, counters); err != nil {
		return nil, err
	}
	if err := sleep(ctx, c.warmup); err != nil {
		return nil, err
	}
	start := make([]int64, len(counters))
	for i, n := range counters {
		start[i] = n.Load()
	}
	t0 := time.Now()
	if err := sleep(ctx, c.duration); err != nil {
		return nil, err
	}
	elapsed := time.Since(t0).Seconds()
	rates := make([]float64, len(counters))
	for i, n := range counters {
		rates[i] = float64(n.Load()-start[i]) / elapsed
	}
	return rates, nil
}

// moving waits until every counter is above zero.
func moving(ctx context.Context, counters []*atomic.Int64) error {
	deadline := time.Now().Add(firstMoveTimeout)
	for _, n := range counters {
		for n.Load() == 0 {
			if time.Now().After(deadline) {
				return errNothingMoved
			}
			if err := sleep(ctx, time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// sleep waits d or until ctx ends (ctx.Err()).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// latencies runs op back to back for c.warmup without keeping samples,
// then for c.duration keeping one monotonic-clock sample per call, and
// returns p50 and p99 of the samples. The first error of op ends it.
func latencies(ctx context.Context, c config, op func(context.Context) error) (result, error) {
	warmEnd := time.Now().Add(c.warmup)
	for time.Now().Before(warmEnd) {
		if err := op(ctx); err != nil {
			return result{}, err
		}
	}
	samples := make([]time.Duration, 0, 1<<14)
	end := time.Now().Add(c.duration)
	for {
		t0 := time.Now()
		if t0.After(end) {
			break
		}
		if err := op(ctx); err != nil {
			return result{}, err
		}
		samples = append(samples, time.Since(t0))
	}
	if len(samples) == 0 {
		return result{}, context.DeadlineExceeded
	}
	slices.Sort(samples)
	return result{p50: quantile(samples, 0.50), p99: quantile(samples, 0.99), samples: len(samples)}, nil
}

// quantile returns the q-quantile of sorted samples (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// middle is the run of runs that the table shows: the middle one by rate,
// or by p50 on a latency row (the upper of two), with every run's number
// added to its note when there were several.
func middle(r row, runs []result) result {
	if len(runs) == 1 {
		return runs[0]
	}
	key := func(m result) float64 { return m.rate }
	show := func(m result) string { return num(m.rate) }
	if r.unit == "" {
		key = func(m result) float64 { return float64(m.p50) }
		show = func(m result) string { return micros(m.p50) }
	}
	sorted := slices.Clone(runs)
	slices.SortStableFunc(sorted, func(a, b result) int { return cmp.Compare(key(a), key(b)) })
	m := sorted[len(sorted)/2]
	all := make([]string, len(runs))
	for i, x := range runs {
		all[i] = show(x)
	}
	m.note = strings.TrimPrefix(m.note+"; runs: "+strings.Join(all, ", "), "; ")
	return m
}
