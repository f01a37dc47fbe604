package ws_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"pigeon"
	"pigeon/demo"
	"pigeon/transport/ws"
)

// A broker served over WebSocket, and a Go service that uses it through the
// same pigeon.Session it would use in process.
func Example() {
	ctx := context.Background()
	e, _ := pigeon.New(ctx, &pigeon.Options{Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog(), Region: "uk"})
	srv := ws.NewServer(e, nil)
	hs := httptest.NewServer(srv)
	defer func() {
		_ = srv.Shutdown(ctx)
		hs.Close()
		_ = e.Shutdown(ctx)
	}()

	s, err := ws.Dial(ctx, hs.URL, "checkout-token", []string{"payments.authorize"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)
	res, err := s.Publish(ctx, demo.Payment("order-1"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Status, res.Message.Sequence, res.Message.Source)

	_, err = s.Publish(ctx, demo.Notification("k-1"))
	var pe *pigeon.Error
	fmt.Println(errors.As(err, &pe), pe.Code, errors.Is(err, pigeon.ErrContract))
	// Output:
	// accepted 1 spiffe://merchant-prod/ns/checkout/sa/checkout-api
	// true SUBJECT_NOT_IN_CONTRACT true
}

// Mount the endpoint in a server of your own; pigeon serve does this at
// /v1/ws.
func ExampleNewServer() {
	e, _ := pigeon.New(context.Background(), nil)
	defer e.Shutdown(context.Background())
	mux := http.NewServeMux()
	mux.Handle("/v1/ws", ws.NewServer(e, &ws.Options{MaxConnections: 1000, PublishRate: 500}))
	fmt.Println("ready")
	// Output: ready
}

// Publish without waiting for each answer: publishes queued while the
// connection is busy leave together in one frame, and each answer, or
// refusal, comes back to its own PendingPublish.
func ExampleSession_PublishAsync() {
	ctx := context.Background()
	e, _ := pigeon.New(ctx, &pigeon.Options{Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog(), Region: "uk"})
	srv := ws.NewServer(e, nil)
	hs := httptest.NewServer(srv)
	defer func() {
		_ = srv.Shutdown(ctx)
		hs.Close()
		_ = e.Shutdown(ctx)
	}()
	s, err := ws.Dial(ctx, hs.URL, "checkout-token", []string{"payments.authorize"}, ws.WithMaxPendingPublishes(256))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx)

	var pending []*ws.PendingPublish
	for _, m := range []*pigeon.Message{demo.Payment("order-1"), demo.Notification("k-1"), demo.Payment("order-2")} {
		p, err := s.PublishAsync(ctx, m)
		if err != nil {
			fmt.Println(err)
			return
		}
		pending = append(pending, p)
	}
	for _, p := range pending {
		res, err := p.Wait(ctx)
		if err != nil {
			fmt.Println(pigeon.ErrorCode(err))
			continue
		}
		fmt.Println(res.Status)
	}
	// Output:
	// accepted
	// SUBJECT_NOT_IN_CONTRACT
	// accepted
}
