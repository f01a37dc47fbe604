package pigeon_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// A reply is not stored, but its records name its id: a reply under the
// id of a message the broker holds (the request's own, or any other) was
// accepted, and its reply.delivered record became a receipt of that
// message, naming the requester as having received it. Such a reply is
// refused MESSAGE_ID_TAKEN; the requester still gets a reply sent under
// a fresh id.
func TestReplyUnderAHeldMessageID(t *testing.T) {
	f := newFixture(t)
	checkout := f.connect("checkout-token", "payments.authorize")
	gateway := f.connect("gateway-token", "payments.authorize")
	other, err := checkout.Publish(ctx, demo.Payment("o-other"))
	require.NoError(t, err)

	done := make(chan error, 1)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	go func() {
		_, err := checkout.Request(rctx, demo.Payment("o-1"))
		done <- err
	}()
	req := receiveOne(t, gateway, "payments.authorize")
	if req.ID == other.Message.ID {
		req = receiveOne(t, gateway, "payments.authorize")
	}
	for _, id := range []string{req.ID, other.Message.ID} {
		m := demo.Approval(req.ID)
		m.ID = id
		_, err := gateway.Publish(ctx, m)
		requireCode(t, err, pigeon.CodeMessageIDTaken)
	}
	_, err = gateway.Publish(ctx, demo.Approval(req.ID))
	require.NoError(t, err)
	require.NoError(t, <-done)

	for _, id := range []string{req.ID, other.Message.ID} {
		rs, err := f.e.Receipts(ctx, id)
		require.NoError(t, err)
		for _, r := range rs {
			require.NotEqual(t, pigeon.EventReplyDelivered, r.Event, "a reply's receipt under %s", id)
			require.NotEqual(t, demo.Checkout, r.Principal)
		}
	}
}
