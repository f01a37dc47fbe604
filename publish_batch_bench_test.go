package pigeon_test

import (
	"context"
	"strconv"
	"testing"

	"pigeon"
	"pigeon/demo"
)

// BenchmarkPublishBatchMemory publishes the governed payment in batches of
// 64 through PublishBatch on the memory store, and the same messages one
// by one through Publish: ns/msg is per message, the audit writer's work
// after the last batch left out.
func BenchmarkPublishBatchMemory(b *testing.B) {
	const size = 64
	for _, tc := range []struct {
		name    string
		publish func(e *pigeon.Engine, c pigeon.Caller, msgs []*pigeon.Message) error
	}{
		{"batch", func(e *pigeon.Engine, c pigeon.Caller, msgs []*pigeon.Message) error {
			for _, p := range e.PublishBatch(context.Background(), c, msgs) {
				if p.Err != nil {
					return p.Err
				}
			}
			return nil
		}},
		{"one by one", func(e *pigeon.Engine, c pigeon.Caller, msgs []*pigeon.Message) error {
			for _, m := range msgs {
				if _, err := e.Publish(context.Background(), c, m); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e := benchEngine(b)
			s := benchSession(b, e, "checkout-token", "payments.authorize")
			who, err := e.Authenticate(context.Background(), "checkout-token")
			if err != nil {
				b.Fatal(err)
			}
			c := pigeon.Caller{Principal: who, Region: "uk", ContractID: s.Contract().ID()}
			msgs := make([]*pigeon.Message, size)
			for i := range msgs {
				msgs[i] = demo.Payment("o")
			}
			b.ReportAllocs()
			b.ResetTimer()
			n := 0
			for b.Loop() {
				for _, m := range msgs {
					m.IdempotencyKey = "k-" + strconv.Itoa(n)
					n++
				}
				if err := tc.publish(e, c, msgs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/msg")
		})
	}
}
