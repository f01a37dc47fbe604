package transporttest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

func testRequestReply(t *testing.T, h Harness) {
	ctx := context.Background()
	checkout := connect(t, h, "checkout-token", "payments.authorize")
	gateway := connect(t, h, "gateway-token", "payments.authorize")
	_, err := gateway.Subscribe(ctx, "payments.authorize", func(ctx context.Context, d *pigeon.Delivery) error {
		_, err := d.Session.Publish(ctx, demo.Approval(d.Message.ID))
		return err
	})
	require.NoError(t, err)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reply, err := checkout.Request(rctx, demo.Payment("o-1"))
	require.NoError(t, err)
	require.JSONEq(t, `{"approved":true}`, string(reply.Data))
	require.Equal(t, demo.Gateway, reply.Source)
}

func testRequestTimeout(t *testing.T, h Harness) {
	checkout := connect(t, h, "checkout-token", "payments.authorize")
	rctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := checkout.Request(rctx, demo.Payment("o-1"))
	requireCode(t, err, pigeon.CodeRequestTimeout)
}
