package pigeon_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"pigeon"
	"pigeon/demo"
)

// benchEngine is an engine on the demo catalog with a memory store and a
// contract TTL long enough for any benchmark.
func benchEngine(b *testing.B) *pigeon.Engine {
	b.Helper()
	e, err := pigeon.New(context.Background(), &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
		Catalog:       demo.Catalog(),
		Region:        "uk",
		ContractTTL:   24 * time.Hour,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	return e
}

func benchSession(b *testing.B, e *pigeon.Engine, token, subject string) pigeon.Session {
	b.Helper()
	s, err := e.Connect(context.Background(), token, []string{subject})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkPublishGoverned is the reference broker's payment message
// through every gate, the schema, the audit chain and the memory store,
// with a unique idempotency key each time.
func BenchmarkPublishGoverned(b *testing.B) {
	e := benchEngine(b)
	s := benchSession(b, e, "checkout-token", "payments.authorize")
	ctx := context.Background()
	msgs := make([]*pigeon.Message, 1024)
	for i := range msgs {
		msgs[i] = demo.Payment("o")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		m := msgs[i%len(msgs)]
		m.IdempotencyKey = "k-" + strconv.Itoa(i)
		if _, err := s.Publish(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPublishGovernedParallel(b *testing.B) {
	e := benchEngine(b)
	s := benchSession(b, e, "checkout-token", "payments.authorize")
	ctx := context.Background()
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		m := demo.Payment("o")
		for pb.Next() {
			m.IdempotencyKey = "k-" + strconv.FormatInt(n.Add(1), 10)
			if _, err := s.Publish(ctx, m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkNegotiate(b *testing.B) {
	e := benchEngine(b)
	ctx := context.Background()
	p, err := e.Authenticate(ctx, "checkout-token")
	if err != nil {
		b.Fatal(err)
	}
	subjects := []string{"payments.authorize"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Negotiate(ctx, p, "uk", subjects, 0); err != nil {
			b.Fatal(err)
		}
	}
}
