package natsbridge_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"pigeon"
	natsbridge "pigeon/bridge/nats"
	"pigeon/policy"
	"pigeon/transport/inproc"
)

// A bridge between a broker in process and a NATS server: plain data
// published on NATS enters Pigeon under the bridge's identity, past every
// gate, and what Pigeon delivers to the bridge leaves for NATS as its
// envelope.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "natsbridge-example")
	defer os.RemoveAll(dir)
	ns, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	ns.Start()
	defer ns.Shutdown()
	ns.ReadyForConnections(10 * time.Second)
	nc, _ := nats.Connect(ns.ClientURL())
	defer nc.Close()

	orders, _ := policy.ParseSubject("orders.json", []byte(`{"name": "orders.events", "version": "v1", "mode": "pubsub",
	  "intents": ["order_event"], "data": {"forbiddenFields": ["card.pan"]},
	  "policy": {"publish": [{"effect": "allow", "principals": ["spiffe://example/bridge"]}],
	             "receive": [{"effect": "allow", "principals": ["spiffe://example/bridge", "spiffe://example/shop"]}],
	             "ack": [{"effect": "allow", "principals": ["spiffe://example/bridge", "spiffe://example/shop"]}]}}`))
	e, _ := pigeon.New(ctx, &pigeon.Options{Catalog: &pigeon.Catalog{Subjects: []pigeon.SubjectPolicy{orders}},
		Authenticator: pigeon.NewStaticTokens(pigeon.StaticToken{Token: "bridge-token", Principal: "spiffe://example/bridge"},
			pigeon.StaticToken{Token: "shop-token", Principal: "spiffe://example/shop"})})
	defer e.Shutdown(ctx)

	b, err := natsbridge.New(natsbridge.Options{
		Dialer: inproc.Dialer{Engine: e}, Credential: "bridge-token", NATS: nc,
		Routes: []natsbridge.Route{
			{Name: "orders-in", Direction: natsbridge.In, Subject: "orders.events", NATSSubject: "legacy.orders",
				Template: natsbridge.Template{Type: "order.created", Intent: "order_event"}},
			{Name: "orders-out", Direction: natsbridge.Out, Subject: "orders.events", NATSSubject: "export.orders"},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	exported, _ := nc.SubscribeSync("export.orders")
	shop, _ := e.Connect(ctx, "shop-token", []string{"orders.events"})
	defer shop.Close(ctx)
	got := make(chan *pigeon.Message, 2)
	shop.Subscribe(ctx, "orders.events", func(_ context.Context, d *pigeon.Delivery) error { got <- d.Message; return nil })
	go b.Run(ctx)
	defer b.Shutdown(ctx)
	for !b.Stats().Connected {
		time.Sleep(time.Millisecond)
	}

	nc.Publish("legacy.orders", []byte(`{"orderId":"o-1","card":{"pan":"4111111111111111"}}`)) // refused by a gate
	nc.Publish("legacy.orders", []byte(`{"orderId":"o-2"}`))
	m := <-got
	fmt.Println(m.Subject, m.Type, m.Source, string(m.Data))
	out, _ := exported.NextMsg(30 * time.Second)
	fmt.Println(out.Header.Get("Pigeon-Bridge"), out.Header.Get("Nats-Msg-Id") == m.ID)
	fmt.Println(b.Stats().Routes[0].Refused)
	// Output:
	// orders.events order.created spiffe://example/bridge {"orderId":"o-2"}
	// orders-out true
	// map[SENSITIVE_FIELD_DENIED:1]
}
