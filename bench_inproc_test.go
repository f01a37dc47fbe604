package pigeon_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"pigeon"
	"pigeon/demo"
	"pigeon/store/memory"
)

// eventsSubject is a pubsub copy of the demo's payments.authorize with all
// of its governance (schema, intents, region policy, idempotency,
// classification, forbidden and tokenized fields, quarantine, rules): the
// subject bench/compare's in-process row publishes on.
const eventsSubject = "payments.events"

// eventsPayload is bench/compare's 259-byte payment.
const eventsPayload = `{"merchantId":"m-100","orderId":"o-7f3a9c21","amount":42.5,"currency":"GBP",` +
	`"paymentToken":"tok_9f8e7d6c5b4a3921","customerId":"cust-42","channel":"web",` +
	`"description":"Order o-7f3a9c21: 2 items, standard delivery",` +
	`"metadata":{"cartId":"cart-5521","ab":"b12"}}`

// eventsEngine is an engine on its defaults, the demo catalog plus
// eventsSubject, a memory store: what bench/compare's in-process row
// runs.
func eventsEngine(tb testing.TB) *pigeon.Engine {
	tb.Helper()
	cat := demo.Catalog()
	for _, s := range cat.Subjects {
		if s.Name == "payments.authorize" {
			ev := s
			ev.Name, ev.Mode = eventsSubject, pigeon.ModePubSub
			ev.Intents = append([]string(nil), s.Intents...)
			cat.Subjects = append(cat.Subjects, ev)
			break
		}
	}
	e, err := pigeon.New(context.Background(), &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
		Catalog:       cat,
		Region:        "uk",
		Store:         memory.New(nil),
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	return e
}

// eventsMessage is bench/compare's message, its idempotency key "k-" and
// i.
func eventsMessage(i int) *pigeon.Message {
	return &pigeon.Message{
		Type: "payment.authorization.requested", Subject: eventsSubject, Intent: "authorize_payment",
		IdempotencyKey: "k-" + strconv.Itoa(i), Classification: "pci", Region: "uk",
		Data: json.RawMessage(eventsPayload),
	}
}

// BenchmarkPublishSubscribeGoverned is bench/compare's in-process row: one
// goroutine publishing on eventsSubject and, with subs=1, one subscriber
// counting what its handler is handed (on the subscription's defaults);
// every message has an idempotency key of its own. ns/op and allocs/op
// are per published message (the key's string included), and the timer
// stops once every message was handled.
func BenchmarkPublishSubscribeGoverned(b *testing.B) {
	for _, subs := range []int{0, 1} {
		b.Run("subs="+strconv.Itoa(subs), func(b *testing.B) {
			e := eventsEngine(b)
			ctx := context.Background()
			var got atomic.Int64
			for range subs {
				s := benchSession(b, e, "gateway-token", eventsSubject)
				if _, err := s.Subscribe(ctx, eventsSubject, func(context.Context, *pigeon.Delivery) error {
					got.Add(1)
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			}
			pub := benchSession(b, e, "checkout-token", eventsSubject)
			msgs := make([]*pigeon.Message, 1024)
			for i := range msgs {
				msgs[i] = eventsMessage(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				m := msgs[i%len(msgs)]
				m.IdempotencyKey = "k-" + strconv.Itoa(i)
				if _, err := pub.Publish(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
			for subs > 0 && got.Load() < int64(b.N) {
				time.Sleep(100 * time.Microsecond)
			}
		})
	}
}
