package programs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
)

// counter is a middleware that closes done once n deliveries succeeded.
type counter struct {
	n, got atomic.Int64
	done   chan struct{}
}

func newCounter(n int) *counter {
	c := &counter{done: make(chan struct{})}
	c.n.Store(int64(n))
	return c
}

func (c *counter) mw(next pigeon.Handler) pigeon.Handler {
	return func(ctx context.Context, d *pigeon.Delivery) error {
		err := next(ctx, d)
		if err == nil && c.got.Add(1) == c.n.Load() {
			close(c.done)
		}
		return err
	}
}

// enrichCompiled is the enricher compiled in: the same work in Go.
func enrichCompiled(ctx context.Context, d *pigeon.Delivery) error {
	var data map[string]any
	if err := json.Unmarshal(d.Message.Data, &data); err != nil {
		return err
	}
	data["tier"] = "gold"
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	_, err = d.Session.Publish(ctx, &pigeon.Message{Type: d.Message.Type, Subject: "orders.out", Intent: d.Message.Intent,
		Classification: d.Message.Classification, IdempotencyKey: d.Message.ID, Data: b})
	return err
}

const benchInFlight = 4

// BenchmarkDeliveries: deliveries per second through a program (one
// publish and one governed delivery each, the enricher also one governed
// publish) beside the same handler compiled in with Engine.Handle; on the
// work queue orders.in, and on the pubsub subject events, where the
// program's binding follows its position.
func BenchmarkDeliveries(b *testing.B) {
	enrichEnv := map[string]string{"ENRICH_FIELD": "tier", "ENRICH_VALUE": "gold", "ENRICH_TO": "orders.out"}
	for _, bc := range []struct {
		name     string
		module   func(testing.TB) []byte
		compiled pigeon.Handler
		env      map[string]string
		subject  string
	}{
		{"trivial/program", func(testing.TB) []byte { return modOK }, nil, nil, "orders.in"},
		{"trivial/compiled", nil, func(context.Context, *pigeon.Delivery) error { return nil }, nil, "orders.in"},
		{"trivial/program/pubsub", func(testing.TB) []byte { return modOK }, nil, nil, "events"},
		{"trivial/compiled/pubsub", nil, func(context.Context, *pigeon.Delivery) error { return nil }, nil, "events"},
		{"enricher/program", func(t testing.TB) []byte { return example(t, "enricher") }, nil, enrichEnv, "orders.in"},
		{"enricher/compiled", nil, enrichCompiled, nil, "orders.in"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := newCounter(b.N)
			f := newFixture(b, nil, c.mw)
			ctx := context.Background()
			if bc.module != nil {
				_, err := f.mg.Deploy(ctx, admin, "p", manifest(func(m *programs.Manifest) {
					m.Route.MaxInFlight = benchInFlight
					m.Route.Subject = bc.subject
					m.Env = bc.env
				}), bc.module(b))
				require.NoError(b, err)
			} else {
				sub, err := f.e.HandleAs(ctx, "deployer-token", []string{bc.subject, "orders.out"}, bc.subject, bc.compiled,
					pigeon.WithMaxInFlight(benchInFlight), pigeon.WithMiddleware(c.mw))
				require.NoError(b, err)
				defer sub.Unsubscribe(ctx)
			}
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				f.publish(b, bc.subject, `{"order":"o-`+strconv.Itoa(i)+`"}`)
			}
			select {
			case <-c.done:
			case <-time.After(2 * time.Minute):
				b.Fatalf("%d of %d deliveries handled", c.got.Load(), b.N)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deliveries/s")
		})
	}
}

// benchModules are the programs the instance benchmarks start: the
// smallest module and a Go program with its runtime.
var benchModules = []struct {
	name   string
	module func(testing.TB) []byte
}{
	{"trivial", func(testing.TB) []byte { return modOK }},
	{"enricher", func(t testing.TB) []byte { return example(t, "enricher") }},
}

// BenchmarkInstanceStart: starting one more instance of a deployed
// program (instantiation and, for a Go program, its runtime's start).
func BenchmarkInstanceStart(b *testing.B) {
	for _, bc := range benchModules {
		b.Run(bc.name, func(b *testing.B) {
			f := newFixture(b, nil)
			ctx := context.Background()
			_, err := f.mg.Deploy(ctx, admin, "p", manifest(), bc.module(b))
			require.NoError(b, err)
			b.ResetTimer()
			for range b.N {
				require.NoError(b, f.mg.StartInstance(ctx, "p"))
			}
		})
	}
}

// BenchmarkIdleProgramMemory reports the Go heap an idle deployed program
// holds (its runtime, compiled module and one idle instance with its
// linear memory), averaged over idlePrograms programs.
func BenchmarkIdleProgramMemory(b *testing.B) {
	const idlePrograms = 10
	for _, bc := range benchModules {
		b.Run(bc.name, func(b *testing.B) {
			module := bc.module(b)
			for range b.N {
				f := newFixture(b, nil)
				ctx := context.Background()
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				for i := range idlePrograms {
					_, err := f.mg.Deploy(ctx, admin, fmt.Sprint("p", i), manifest(group(fmt.Sprint("g", i))), module)
					require.NoError(b, err)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/idlePrograms, "heap-B/program")
				b.ReportMetric(float64(int64(after.Sys)-int64(before.Sys))/idlePrograms, "sys-B/program")
				f.stop(b)
			}
		})
	}
}
