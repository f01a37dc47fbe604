package pigeon_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

func TestHandleWithMiddlewareReplies(t *testing.T) {
	f := newFixture(t, func(o *pigeon.Options) { o.Now = nil })
	var mu sync.Mutex
	var trail []string
	logMW := func(name string) pigeon.Middleware {
		return func(next pigeon.Handler) pigeon.Handler {
			return func(ctx context.Context, d *pigeon.Delivery) error {
				mu.Lock()
				trail = append(trail, name)
				mu.Unlock()
				return next(ctx, d)
			}
		}
	}
	sub, err := f.e.Handle(ctx, "gateway-token", "payments.authorize", func(ctx context.Context, d *pigeon.Delivery) error {
		var req map[string]any
		if err := json.Unmarshal(d.Message.Data, &req); err != nil {
			return err
		}
		_, err := d.Session.Publish(ctx, &pigeon.Message{Type: "payment.authorization.result", Subject: "payments.authorize",
			Intent: "authorize_payment", Classification: "pci", CorrelationID: d.Message.ID,
			Data: json.RawMessage(`{"approved":true,"orderId":"` + req["orderId"].(string) + `"}`)})
		return err
	}, pigeon.WithMiddleware(logMW("outer"), logMW("inner")))
	require.NoError(t, err)
	checkout := f.connect("checkout-token", "payments.authorize")
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reply, err := checkout.Request(rctx, demo.Payment("o-77"))
	require.NoError(t, err)
	require.JSONEq(t, `{"approved":true,"orderId":"o-77"}`, string(reply.Data))
	mu.Lock()
	require.Equal(t, []string{"outer", "inner"}, trail)
	mu.Unlock()
	require.NoError(t, sub.Unsubscribe(ctx))

	// A reply that breaks a gate is refused like any message.
	_, err = f.e.Handle(ctx, "catalog-token", "payments.authorize", func(context.Context, *pigeon.Delivery) error { return nil })
	requireCode(t, err, pigeon.CodeNoPermittedSubjects)
}

func TestReplyGoverned(t *testing.T) {
	f := newFixture(t)
	checkout := f.connect("checkout-token", "payments.authorize")
	gateway := f.connect("gateway-token", "payments.authorize")
	res, err := checkout.Publish(ctx, demo.Payment("o-1"))
	require.NoError(t, err)
	// A reply carrying a raw PAN is refused.
	_, err = gateway.Publish(ctx, &pigeon.Message{Type: "r", Subject: "payments.authorize", Intent: "authorize_payment", Classification: "pci",
		CorrelationID: res.Message.ID, Data: json.RawMessage(`{"card":{"pan":"4111111111111111"}}`)})
	requireCode(t, err, pigeon.CodeSensitiveFieldDenied)
	// Someone without receive cannot reply.
	orders := f.connect("orders-token", "notifications.send")
	c := orders.(interface{ Caller() pigeon.Caller }).Caller()
	_, err = f.e.Publish(ctx, c, &pigeon.Message{Type: "r", Subject: "payments.authorize", Intent: "authorize_payment", CorrelationID: res.Message.ID})
	requireCode(t, err, pigeon.CodeSubjectNotInContract)
	require.True(t, errors.Is(err, pigeon.ErrDenied))
}
