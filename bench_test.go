package pigeon_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"pigeon"
	"pigeon/demo"
	"pigeon/metrics"
	"pigeon/transport/transporttest"
)

// benchEngine is an engine on the demo catalog with a memory store and a
// contract TTL long enough for any benchmark; with adjust changing the
// options.
func benchEngine(b *testing.B, adjust ...func(*pigeon.Options)) *pigeon.Engine {
	b.Helper()
	opts := transporttest.Options()
	for _, f := range adjust {
		f(opts)
	}
	opts.ContractTTL = 24 * time.Hour
	// Benchmarks negotiate far more than a principal may: no cap, no rate
	// (the live-contract accounting still runs).
	opts.MaxContractsPerPrincipal, opts.NegotiateRate.PerSecond = -1, -1
	e, err := pigeon.New(context.Background(), opts)
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
func BenchmarkPublishGoverned(b *testing.B) { publishGoverned(b, benchEngine(b)) }

// BenchmarkPublishGovernedObserved is BenchmarkPublishGoverned with the
// Prometheus metrics observing the engine (metrics.New as Options.Observer):
// the difference is what /metrics costs the hot path.
func BenchmarkPublishGovernedObserved(b *testing.B) {
	m, err := metrics.New(prometheus.NewRegistry(), &metrics.Options{NoRuntime: true})
	if err != nil {
		b.Fatal(err)
	}
	publishGoverned(b, benchEngine(b, func(o *pigeon.Options) { o.Observer = m }))
}

func publishGoverned(b *testing.B, e *pigeon.Engine) {
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

// BenchmarkGate measures each built-in gate on the payment message, after
// the contract gate has resolved the contract.
func BenchmarkGate(b *testing.B) {
	e := benchEngine(b)
	s := benchSession(b, e, "checkout-token", "payments.authorize")
	c := s.(interface{ Caller() pigeon.Caller }).Caller()
	ctx := context.Background()
	gates := e.Gates()
	for _, g := range gates {
		b.Run(g.Name(), func(b *testing.B) {
			a := e.NewAdmission(c, demo.Payment("o-1"))
			if v := gates[1].Check(ctx, a); !v.Allowed() {
				b.Fatal(v)
			}
			b.ReportAllocs()
			for b.Loop() {
				if v := g.Check(ctx, a); !v.Allowed() {
					b.Fatal(v)
				}
			}
		})
	}
}

// BenchmarkDeliver is publish → handler latency and throughput in process:
// each iteration publishes one message and waits for its handler.
func BenchmarkDeliver(b *testing.B) {
	e := benchEngine(b)
	ctx := context.Background()
	pub := benchSession(b, e, "alice-token", "chat.messages")
	sub := benchSession(b, e, "bob-token", "chat.messages")
	got := make(chan struct{}, 1)
	if _, err := sub.Subscribe(ctx, "chat.messages", func(context.Context, *pigeon.Delivery) error { got <- struct{}{}; return nil }); err != nil {
		b.Fatal(err)
	}
	m := chatMessage("lobby")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := pub.Publish(ctx, m); err != nil {
			b.Fatal(err)
		}
		<-got
	}
}

// BenchmarkFanOut publishes b.N messages to n subscribers and waits until
// every subscriber has every message; ns/op is per published message.
func BenchmarkFanOut(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run("subs="+strconv.Itoa(n), func(b *testing.B) {
			e := benchEngine(b)
			ctx := context.Background()
			pub := benchSession(b, e, "alice-token", "chat.messages")
			var delivered atomic.Int64
			for range n {
				s := benchSession(b, e, "bob-token", "chat.messages")
				if _, err := s.Subscribe(ctx, "chat.messages", func(context.Context, *pigeon.Delivery) error { delivered.Add(1); return nil }); err != nil {
					b.Fatal(err)
				}
			}
			m := chatMessage("lobby")
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := pub.Publish(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
			for delivered.Load() < int64(b.N*n) {
				time.Sleep(100 * time.Microsecond)
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "deliveries/s")
		})
	}
}

// BenchmarkWorkQueue has 4 competing consumers handle b.N jobs.
func BenchmarkWorkQueue(b *testing.B) {
	e := benchEngine(b)
	ctx := context.Background()
	boss := benchSession(b, e, "boss-token", "jobs.run")
	var done atomic.Int64
	for range 4 {
		s := benchSession(b, e, "crew-token", "jobs.run")
		if _, err := s.Subscribe(ctx, "jobs.run", func(context.Context, *pigeon.Delivery) error { done.Add(1); return nil }, pigeon.WithMaxInFlight(16)); err != nil {
			b.Fatal(err)
		}
	}
	m := &pigeon.Message{Type: "job", Subject: "jobs.run", Intent: "run", Data: []byte(`{"n":1}`)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := boss.Publish(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	for done.Load() < int64(b.N) {
		time.Sleep(100 * time.Microsecond)
	}
}

func chatMessage(room string) *pigeon.Message {
	return &pigeon.Message{Type: "chat.message", Subject: "chat.messages", Intent: "chat",
		Data: []byte(`{"kind":"chat","room":"` + room + `","text":"hello"}`)}
}

// BenchmarkAccessCheck is the per-message cost of checking a contract whose
// principal came with a grant token (and roles from its account) when
// nothing changed: one version comparison. "changed" bumps the directory
// every iteration, forcing the roles to be recomputed.
func BenchmarkAccessCheck(b *testing.B) {
	e := benchEngine(b)
	ctx := context.Background()
	if _, err := e.CreateAccount(ctx, pigeon.Account{ID: transporttest.Boss, Roles: []string{"boss"}}); err != nil {
		b.Fatal(err)
	}
	g, err := e.IssueGrant(ctx, transporttest.Boss, []string{"boss"}, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	s := benchSession(b, e, g.Token, "jobs.run")
	c := s.(interface{ Caller() pigeon.Caller }).Caller()
	contractGate := e.Gates()[1]
	a := e.NewAdmission(c, &pigeon.Message{Type: "job", Subject: "jobs.run", Intent: "run", Data: []byte(`{"n":1}`)})
	b.Run("unchanged", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if v := contractGate.Check(ctx, a); !v.Allowed() {
				b.Fatal(v)
			}
		}
	})
	b.Run("changed", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := e.PutRole(ctx, pigeon.Role{Name: "other", Permissions: []pigeon.Permission{}}); err != nil {
				b.Fatal(err)
			}
			if v := contractGate.Check(ctx, a); !v.Allowed() {
				b.Fatal(v)
			}
		}
	})
}

// BenchmarkSignatureGate is the signature gate on a signed message.
func BenchmarkSignatureGate(b *testing.B) {
	opts := transporttest.Options()
	opts.Catalog.Subjects = append(opts.Catalog.Subjects, pigeon.SubjectPolicy{Name: "signed.jobs", Version: "v1", Intents: []string{"run"},
		Integrity: pigeon.IntegrityPolicy{Signature: "required"},
		Policy:    map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: {{Effect: "allow", Principals: []string{transporttest.Boss}}}}})
	e, err := pigeon.New(context.Background(), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	ctx := context.Background()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	if _, err := e.CreateAccount(ctx, pigeon.Account{ID: transporttest.Boss, Keys: []pigeon.PublicKey{pigeon.Ed25519PublicKey("k1", pub)}}); err != nil {
		b.Fatal(err)
	}
	s := benchSession(b, e, "boss-token", "signed.jobs")
	c := s.(interface{ Caller() pigeon.Caller }).Caller()
	m := &pigeon.Message{Type: "job", Subject: "signed.jobs", Intent: "run", Data: []byte(`{"n":1}`)}
	if err := pigeon.SignMessage(m, "k1", priv); err != nil {
		b.Fatal(err)
	}
	a := e.NewAdmission(c, m)
	gates := e.Gates()
	if v := gates[1].Check(ctx, a); !v.Allowed() {
		b.Fatal(v)
	}
	var sig pigeon.Gate
	for _, g := range gates {
		if g.Name() == pigeon.GateSignature {
			sig = g
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if v := sig.Check(ctx, a); !v.Allowed() {
			b.Fatal(v)
		}
	}
}

// BenchmarkRequestReply is a request on the demo payment subject answered
// by a gateway's handler, in process, through every gate both ways:
// ns/op is the round trip, p50-µs its median.
func BenchmarkRequestReply(b *testing.B) {
	e := benchEngine(b)
	ctx := context.Background()
	gw := benchSession(b, e, "gateway-token", "payments.authorize")
	if _, err := gw.Subscribe(ctx, "payments.authorize", func(ctx context.Context, d *pigeon.Delivery) error {
		_, err := d.Session.Publish(ctx, demo.Approval(d.Message.ID))
		return err
	}); err != nil {
		b.Fatal(err)
	}
	client := benchSession(b, e, "checkout-token", "payments.authorize")
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
