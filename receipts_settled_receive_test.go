package pigeon_test

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// TestReceiptsRightAfterASettledReceive: a pull that settles what it
// hands out (ReceiveSettled, the HTTP pull) records delivery.dispatched
// and delivery.acked without waiting for their write, and Receipts read
// the store without writing what was still queued, as Engine.Audit does:
// asked right after the ack, it answered that nobody had received the
// message. Receipts now writes the queue first. In a synctest bubble the
// audit writer's linger does not run out while the test runs, so the
// records are still queued when Receipts is asked, every time.
func TestReceiptsRightAfterASettledReceive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		pub := f.connect("checkout-token", "payments.authorize")
		res, err := pub.Publish(ctx, demo.Payment("o"))
		require.NoError(t, err)
		gw := f.connect("gateway-token", "payments.authorize")
		p, err := f.e.Authenticate(ctx, "gateway-token")
		require.NoError(t, err)
		c := pigeon.Caller{Principal: p, ContractID: gw.Contract().ID()}
		got, err := f.e.ReceiveSettled(ctx, c, "payments.authorize", 1)
		require.NoError(t, err)
		require.Len(t, got, 1)

		rs, err := f.e.Receipts(ctx, res.Message.ID) // no polling: at once
		require.NoError(t, err)
		var events []pigeon.Event
		for _, r := range rs {
			require.Equal(t, demo.Gateway, r.Principal)
			require.Equal(t, res.Message.Sequence, r.Seq)
			events = append(events, r.Event)
		}
		require.Equal(t, []pigeon.Event{pigeon.EventDeliveryDispatched, pigeon.EventDeliveryAcked}, events)
	})
}
