package ws_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pigeon"
	"pigeon/demo"
	"pigeon/store/wal"
	"pigeon/transport/ws"
)

// benchEnv is a server with no publish rate limit and contracts that
// outlive any benchmark.
func benchEnv(b *testing.B) *env {
	return newEnv(b, &ws.Options{PublishRate: -1, MaxInFlight: 1024}, func(o *pigeon.Options) {
		o.ContractTTL = 24 * time.Hour
	})
}

// BenchmarkPublishPipelined is the governed payment publish (every gate,
// the schema, the audit chain) over one WebSocket connection shared by many
// goroutines, so that publishes are pipelined.
func BenchmarkPublishPipelined(b *testing.B) {
	v := benchEnv(b)
	s := v.dial(b, "checkout-token", []string{"payments.authorize"})
	ctx := context.Background()
	var n atomic.Int64
	b.SetParallelism(64)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		m := demo.Payment("o")
		for pb.Next() {
			m.IdempotencyKey = "k-" + strconv.FormatInt(n.Add(1), 10)
			if _, err := s.Publish(ctx, m); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkPublishRoundTrip waits for each answer before the next publish.
func BenchmarkPublishRoundTrip(b *testing.B) {
	v := benchEnv(b)
	s := v.dial(b, "checkout-token", []string{"payments.authorize"})
	ctx := context.Background()
	m := demo.Payment("o")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		m.IdempotencyKey = "k-" + strconv.Itoa(i)
		if _, err := s.Publish(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublishAsync is the governed payment publish over one
// WebSocket connection from one goroutine with PublishAsync. batched is
// the client as it is: publishes queued while the writer is busy leave as
// one publish_batch frame; corked sends each as its own publish frame, a
// burst of them under one cork, for comparison.
func BenchmarkPublishAsync(b *testing.B) {
	for _, tc := range []struct {
		name  string
		limit int
	}{{"batched", ws.MaxPublishBatch}, {"corked", 1}} {
		b.Run(tc.name, func(b *testing.B) {
			defer ws.SetPublishBatchLimit(tc.limit)()
			benchPublishAsync(b)
		})
	}
}

func benchPublishAsync(b *testing.B) {
	v := benchEnv(b)
	s := v.dial(b, "checkout-token", []string{"payments.authorize"})
	ctx := context.Background()
	m := demo.Payment("o")
	ring := make([]*ws.PendingPublish, ws.DefaultMaxPendingPublishes)
	wait := func(p *ws.PendingPublish) {
		if p == nil {
			return
		}
		if _, err := p.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		m.IdempotencyKey = "k-" + strconv.Itoa(i)
		slot := i % len(ring)
		wait(ring[slot])
		p, err := s.PublishAsync(ctx, m)
		if err != nil {
			b.Fatal(err)
		}
		ring[slot] = p
	}
	for _, p := range ring {
		wait(p)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkPublishAsyncDeliver is the transport side of what
// bench/compare measures as network/pigeon-ws: one session publishes the
// governed payment asynchronously, another, on its own connection, takes
// every message with an acknowledged subscription (the demo payment
// subject is request-reply, so its deliveries are leased, where
// bench/compare's subject is pubsub). ns/op is per message delivered;
// cpu-ns/msg is the process's CPU time (user and system) per message,
// which varies less than ns/op on a shared machine.
func BenchmarkPublishAsyncDeliver(b *testing.B) {
	v := benchEnv(b)
	ctx := context.Background()
	var got atomic.Int64
	target := make(chan struct{})
	var want atomic.Int64
	want.Store(-1)
	gw := v.dial(b, "gateway-token", []string{"payments.authorize"})
	if _, err := gw.Subscribe(ctx, "payments.authorize", func(context.Context, *pigeon.Delivery) error {
		if got.Add(1) == want.Load() {
			close(target)
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	s := v.dial(b, "checkout-token", []string{"payments.authorize"})
	m := demo.Payment("o")
	ring := make([]*ws.PendingPublish, ws.DefaultMaxPendingPublishes)
	wait := func(p *ws.PendingPublish) {
		if p == nil {
			return
		}
		if _, err := p.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	n := 0
	for i := 0; b.Loop(); i++ {
		m.IdempotencyKey = "k-" + strconv.Itoa(i)
		slot := i % len(ring)
		wait(ring[slot])
		p, err := s.PublishAsync(ctx, m)
		if err != nil {
			b.Fatal(err)
		}
		ring[slot] = p
		n++
	}
	for _, p := range ring {
		wait(p)
	}
	if want.Store(int64(n)); got.Load() < int64(n) {
		<-target
	}
	b.StopTimer()
	cpu = cpuTime() - cpu
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/msg")
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
}

// publishN publishes n chat messages from 16 goroutines on s.
func publishN(b *testing.B, s pigeon.Session, n int) {
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: []byte(`{"kind":"chat","room":"lobby","text":"hello"}`)}
			for next.Add(1) <= int64(n) {
				if _, err := s.Publish(context.Background(), m); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkPublishDeliver is publish → push through the server: a
// publisher session and a subscriber session on two connections; ns/op is
// the time per message from the first publish to the last delivery acked.
func BenchmarkPublishDeliver(b *testing.B) { benchDeliver(b, 1, "msgs/s") }

// BenchmarkFanout100 delivers each message to 100 WebSocket subscribers,
// each on its own connection; ns/op is per published message, and
// deliveries/s counts every push acked.
func BenchmarkFanout100(b *testing.B) { benchDeliver(b, 100, "deliveries/s") }

// benchDeliver publishes b.N messages on one connection to subs
// subscribers, each on its own connection with the default subscription
// (one handler, a window of pushes in flight, acks), and reports the
// deliveries handled a second as metric.
func benchDeliver(b *testing.B, subs int, metric string) {
	v := benchEnv(b)
	pub := v.dial(b, "alice-token", []string{"chat.messages"})
	var got atomic.Int64
	done := make(chan struct{})
	target := int64(b.N) * int64(subs)
	for range subs {
		s := v.dial(b, "bob-token", []string{"chat.messages"})
		_, err := s.Subscribe(context.Background(), "chat.messages", func(context.Context, *pigeon.Delivery) error {
			if got.Add(1) == target {
				close(done)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	publishN(b, pub, b.N)
	<-done
	b.StopTimer()
	b.ReportMetric(float64(target)/b.Elapsed().Seconds(), metric)
}

// BenchmarkPublishDurable is the governed payment publish to a write-ahead
// log that fsyncs before answering (group commit), from 64 goroutines on
// one connection: sync publishes, or one goroutine publishing async.
func BenchmarkPublishDurable(b *testing.B) {
	durable := func(b *testing.B) *ws.Session {
		st, err := wal.Open(b.TempDir(), nil)
		if err != nil {
			b.Fatal(err)
		}
		v := newEnv(b, &ws.Options{PublishRate: -1, MaxInFlight: 1024}, func(o *pigeon.Options) {
			o.ContractTTL = 24 * time.Hour
			o.Store = st
		})
		return v.dial(b, "checkout-token", []string{"payments.authorize"})
	}
	b.Run("single", func(b *testing.B) {
		s := durable(b)
		ctx := context.Background()
		m := demo.Payment("o")
		lat := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			m.IdempotencyKey = "k-" + strconv.Itoa(i)
			t0 := time.Now()
			if _, err := s.Publish(ctx, m); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		b.StopTimer()
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	})
	b.Run("sync64", func(b *testing.B) {
		s := durable(b)
		var n atomic.Int64
		b.SetParallelism(32) // 64 goroutines on 2 cores
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			m := demo.Payment("o")
			for pb.Next() {
				m.IdempotencyKey = "k-" + strconv.FormatInt(n.Add(1), 10)
				if _, err := s.Publish(context.Background(), m); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
	b.Run("async", func(b *testing.B) {
		s := durable(b)
		ctx := context.Background()
		m := demo.Payment("o")
		ring := make([]*ws.PendingPublish, ws.DefaultMaxPendingPublishes)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			m.IdempotencyKey = "k-" + strconv.Itoa(i)
			slot := i % len(ring)
			if p := ring[slot]; p != nil {
				if _, err := p.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
			p, err := s.PublishAsync(ctx, m)
			if err != nil {
				b.Fatal(err)
			}
			ring[slot] = p
		}
		for _, p := range ring {
			if p != nil {
				if _, err := p.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
}

// BenchmarkRequestReply is a request on the demo payment subject over one
// connection, answered by a gateway's handler over another: ns/op is the
// round trip, p50-µs its median.
func BenchmarkRequestReply(b *testing.B) {
	v := benchEnv(b)
	ctx := context.Background()
	gw := v.dial(b, "gateway-token", []string{"payments.authorize"})
	if _, err := gw.Subscribe(ctx, "payments.authorize", func(ctx context.Context, d *pigeon.Delivery) error {
		_, err := d.Session.Publish(ctx, &pigeon.Message{Type: "payment.authorization.result", Subject: "payments.authorize",
			Intent: "authorize_payment", Classification: "pci", CorrelationID: d.Message.ID, Data: []byte(`{"approved":true}`)})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	client := v.dial(b, "checkout-token", []string{"payments.authorize"})
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		if _, err := client.Request(ctx, demo.Payment("o-"+strconv.Itoa(i))); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
}
