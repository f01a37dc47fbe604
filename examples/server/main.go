// Command server shows a Go service on the WebSocket session: a payment
// gateway answers authorization requests that a checkout service sends,
// both over WebSocket, with the same pigeon.Session they would use in
// process. Point it at a running broker:
//
//	go run ./cmd/pigeon serve            # in one terminal
//	go run ./examples/server --url http://127.0.0.1:8787
//
// or run it alone and it starts a demo broker in process on 127.0.0.1.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"pigeon"
	"pigeon/demo"
	"pigeon/server"
	"pigeon/transport/ws"
)

func main() {
	url := flag.String("url", "", "URL of a running pigeon server (default: start a demo broker in process)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, *url, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "server example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, out io.Writer) error {
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	if url == "" {
		stop, u, err := startBroker(ctx)
		if err != nil {
			return err
		}
		defer stop()
		url = u
		say("started a demo broker at %s", url)
	}

	// The gateway answers every authorization request it is handed. A
	// handler acks by returning nil; an error or a panic nacks, and the
	// broker redelivers.
	gateway, err := ws.Dial(ctx, url, "gateway-token", []string{"payments.authorize"})
	if err != nil {
		return err
	}
	defer gateway.Close(ctx)
	_, err = gateway.Subscribe(ctx, "payments.authorize", func(ctx context.Context, d *pigeon.Delivery) error {
		var req struct{ OrderID string }
		_ = json.Unmarshal(d.Message.Data, &req)
		_, err := d.Session.Publish(ctx, &pigeon.Message{
			Type: "payment.authorization.result", Subject: "payments.authorize", Intent: "authorize_payment",
			Classification: "pci", CorrelationID: d.Message.ID,
			Data: json.RawMessage(fmt.Sprintf(`{"orderId":%q,"approved":true}`, req.OrderID)),
		})
		return err
	}, pigeon.WithMaxInFlight(8))
	if err != nil {
		return err
	}
	say("gateway-adapter subscribed to payments.authorize over WebSocket")

	checkout, err := ws.Dial(ctx, url, "checkout-token", []string{"payments.authorize"})
	if err != nil {
		return err
	}
	defer checkout.Close(ctx)
	c := checkout.Contract().Info()
	say("checkout-api negotiated contract %s: %v on %s", c.ID, c.Subjects[0].Operations, c.Subjects[0].Name)

	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// A fresh order each run: the idempotency key is "pay-" + the order id,
	// and a repeated request would be a duplicate of one answered before.
	order := fmt.Sprintf("order-%d", time.Now().UnixNano())
	reply, err := checkout.Request(rctx, demo.Payment(order))
	if err != nil {
		return err
	}
	say("request/reply: %s answered %s", reply.Source, reply.Data)

	// Refusals are the same typed errors as in process.
	bad := demo.Payment(order + "-b")
	bad.Data = json.RawMessage(`{"merchantId":"m-100","orderId":"` + order + `-b","amount":5,"currency":"GBP","paymentToken":"4111111111111111"}`)
	_, err = checkout.Publish(ctx, bad)
	var pe *pigeon.Error
	if !errors.As(err, &pe) {
		return fmt.Errorf("a raw card number was not refused: %v", err)
	}
	say("a raw card number is refused: %s (quarantined: %v, record %v)", pe.Code, errors.Is(err, pigeon.ErrQuarantined), pe.Details["quarantineId"])

	_, err = ws.Dial(ctx, url, "catalog-token", []string{"payments.authorize"})
	if !errors.As(err, &pe) {
		return fmt.Errorf("catalog-api was not refused: %v", err)
	}
	say("catalog-api may not even negotiate: %s", pe.Code)
	return nil
}

// startBroker runs the demo catalog behind a server on 127.0.0.1.
func startBroker(ctx context.Context) (stop func(), url string, err error) {
	e, err := pigeon.New(ctx, &pigeon.Options{Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog(), Region: "uk"})
	if err != nil {
		return nil, "", err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = e.Shutdown(ctx)
		return nil, "", err
	}
	srv := server.New(e, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
		_ = e.Shutdown(sctx)
	}, "http://" + l.Addr().String(), nil
}
