package ws_test

import (
	"cmp"
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"pigeon"
	"pigeon/transport/ws"
)

// eventsSubject is a pubsub copy of the demo payment subject, with all its
// governance (schema, intents, region, idempotency, tokenized and forbidden
// fields, publish, receive and ack rules), as bench/compare measures it.
const eventsSubject = "payments.events"

// withEvents adds eventsSubject to the catalog.
func withEvents(o *pigeon.Options) {
	for _, s := range o.Catalog.Subjects {
		if s.Name == "payments.authorize" {
			s.Name, s.Mode = eventsSubject, pigeon.ModePubSub
			s.Intents = append([]string(nil), s.Intents...)
			o.Catalog.Subjects = append(o.Catalog.Subjects, s)
			return
		}
	}
}

// eventPayload is bench/compare's payment authorization: 259 bytes.
var eventPayload = []byte(`{"merchantId":"m-100","orderId":"o-7f3a9c21","amount":42.5,"currency":"GBP",` +
	`"paymentToken":"tok_9f8e7d6c5b4a3921","customerId":"cust-42","channel":"web",` +
	`"description":"Order o-7f3a9c21: 2 items, standard delivery",` +
	`"metadata":{"cartId":"cart-5521","ab":"b12"}}`)

// BenchmarkPubSubOverWS is bench/compare's network/pigeon-ws (acked) and
// network/pigeon-ws-atmostonce on the transport alone: one session
// publishes the governed payment with PublishAsync while another goroutine
// waits for the answers in order, and a subscriber session, on its own
// connection, takes every message on a pubsub subject. ns/op is per
// message published; handled/msg the share of them the handler ran on
// (at most once drops what its queue cannot hold); cpu-ns/msg the
// process's CPU time per message; up-frames/msg the frames the server
// read (publish_batch, ack) per message; syscalls/msg, where the system
// counts them (Linux), the process's reads and writes per message.
func BenchmarkPubSubOverWS(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts []pigeon.SubscribeOption
	}{{"acked", nil}, {"atmostonce", []pigeon.SubscribeOption{pigeon.WithAtMostOnce()}}} {
		b.Run(tc.name, func(b *testing.B) { benchPubSub(b, tc.opts...) })
	}
}

func benchPubSub(b *testing.B, opts ...pigeon.SubscribeOption) {
	var up atomic.Int64
	v := newEnv(b, ws.WithReadHook(nil, func(*ws.Frame) { up.Add(1) }), withEvents, func(o *pigeon.Options) {
		o.ContractTTL = 24 * time.Hour
	})
	ctx := context.Background()
	var got atomic.Int64
	sess := v.dial(b, "gateway-token", []string{eventsSubject})
	sub, err := sess.Subscribe(ctx, eventsSubject, func(context.Context, *pigeon.Delivery) error {
		got.Add(1)
		return nil
	}, opts...)
	if err != nil {
		b.Fatal(err)
	}
	pub := v.dial(b, "checkout-token", []string{eventsSubject})
	pending := make(chan *ws.PendingPublish, ws.DefaultMaxPendingPublishes)
	type outcome struct {
		last uint64 // the highest sequence accepted
		err  error
	}
	answered := make(chan outcome, 1)
	go func() {
		var o outcome
		for p := range pending {
			res, err := p.Wait(ctx)
			switch {
			case err != nil:
				o.err = cmp.Or(o.err, err)
			case res.Message.Sequence > o.last:
				o.last = res.Message.Sequence
			}
		}
		answered <- o
	}()
	up.Store(0)
	b.ReportAllocs()
	b.ResetTimer()
	cpu, sys := cpuTime(), syscallCount()
	n := 0
	for i := 0; b.Loop(); i++ {
		p, err := pub.PublishAsync(ctx, &pigeon.Message{
			Type: "payment.authorization.requested", Subject: eventsSubject, Intent: "authorize_payment",
			IdempotencyKey: "k-" + strconv.Itoa(i), Classification: "pci", Region: "uk",
			Data: json.RawMessage(eventPayload),
		})
		if err != nil {
			b.Fatal(err)
		}
		pending <- p
		n++
	}
	close(pending)
	o := <-answered
	if o.err != nil {
		b.Fatal(o.err)
	}
	// Every message reached the handler or, at most once, reached the
	// subscription and was dropped there (its handler not keeping up).
	for got.Load() < int64(n) && (len(opts) == 0 || ws.ReceivedThrough(sub) < o.last || ws.QueuedDeliveries(sub) > 0) {
		time.Sleep(100 * time.Microsecond)
	}
	b.StopTimer()
	cpu, sys = cpuTime()-cpu, syscallCount()-sys
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/msg")
	b.ReportMetric(float64(up.Load())/float64(n), "up-frames/msg")
	b.ReportMetric(float64(got.Load())/float64(n), "handled/msg")
	if sys >= 0 {
		b.ReportMetric(float64(sys)/float64(n), "syscalls/msg")
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
}
