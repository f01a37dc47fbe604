package natsbridge

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"pigeon"
)

// A delivery handed to an Out route before the bridge's contract was
// revoked, and not yet published to NATS when it was, is not published:
// the broker ended the delivery (its context) at the revocation, and what
// leaves Pigeon is what the contract allows at that moment. Core NATS
// takes a publish whatever the context says, so the route checks it.
func TestOutRevokedMidDeliveryIsNotPublished(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			v := newEnv(t)
			sub, err := v.tc.SubscribeSync("bridge.orders")
			require.NoError(t, err)
			require.NoError(t, v.tc.Flush())
			b, err := New(Options{Dialer: tr.dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
				{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "bridge.orders"},
			}})
			require.NoError(t, err)
			revoked := make(chan bool, 1)
			b.beforeOut = func(ctx context.Context, _, _ string) {
				p, err := v.e.Authenticate(context.Background(), bridgeToken)
				if err == nil {
					err = v.e.RevokeContract(context.Background(), p, b.Stats().ContractID)
				}
				if err != nil {
					revoked <- false
					return
				}
				select {
				case <-ctx.Done(): // the broker ended the delivery
					revoked <- true
				case <-time.After(10 * time.Second):
					revoked <- false
				}
			}
			rb := startBridge(t, b)
			_, err = publisher(t, v.e).Publish(t.Context(), order("in-flight"))
			require.NoError(t, err)
			select {
			case ok := <-revoked:
				require.True(t, ok, "the revocation ended the delivery")
			case <-time.After(30 * time.Second):
				t.Fatal("no delivery")
			}
			err = rb.wait(t, 10*time.Second)
			require.Equal(t, pigeon.CodeContractRevoked, code(t, err))
			m, err := sub.NextMsg(300 * time.Millisecond)
			require.ErrorIs(t, err, nats.ErrTimeout, "the delivery in flight at the revocation left")
			require.Nil(t, m)
			require.Zero(t, routeStats(b, "orders-out").Forwarded)
		})
	}
}
