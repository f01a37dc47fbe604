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
	replied := make(chan *pigeon.Result, 1)
	_, err := gateway.Subscribe(ctx, "payments.authorize", func(ctx context.Context, d *pigeon.Delivery) error {
		res, err := d.Session.Publish(ctx, demo.Approval(d.Message.ID))
		if err == nil {
			replied <- res
		}
		return err
	})
	require.NoError(t, err)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reply, err := checkout.Request(rctx, demo.Payment("o-1"))
	require.NoError(t, err)
	require.JSONEq(t, `{"approved":true}`, string(reply.Data))
	require.Equal(t, demo.Gateway, reply.Source)
	// The replier's result is the reply the requester got.
	res := <-replied
	require.Equal(t, pigeon.StatusAccepted, res.Status)
	require.Equal(t, reply.ID, res.Message.ID)
	require.Equal(t, string(reply.Data), string(res.Message.Data))
}

func testRequestTimeout(t *testing.T, h Harness) {
	checkout := connect(t, h, "checkout-token", "payments.authorize")
	rctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := checkout.Request(rctx, demo.Payment("o-1"))
	requireCode(t, err, pigeon.CodeRequestTimeout)
}
