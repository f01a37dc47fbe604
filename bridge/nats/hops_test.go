package natsbridge

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// An Out route carries the envelope as the broker stored it, hops included
// (the depth a program gave it): a NATS reader sees what a subscriber of
// the broker sees. An In route counts its pass from it (TestInCountsAHop).
func TestOutCarriesHops(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			v := newEnv(t)
			sub, err := v.tc.SubscribeSync("bridge.orders")
			require.NoError(t, err)
			require.NoError(t, v.tc.Flush())
			start(t, Options{Dialer: tr.dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
				{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "bridge.orders"},
			}})
			// A caller two programs deep, as package programs publishes.
			p, err := v.e.Authenticate(t.Context(), appToken)
			require.NoError(t, err)
			c, err := v.e.Negotiate(t.Context(), p, "", []string{ordersSubject}, 0)
			require.NoError(t, err)
			res, err := v.e.Publish(t.Context(), pigeon.Caller{Principal: p, Region: "uk", ContractID: c.ID(), Hops: 2}, order("o-1"))
			require.NoError(t, err)
			require.Equal(t, uint32(2), res.Message.Hops)
			m, err := sub.NextMsg(30 * time.Second)
			require.NoError(t, err)
			require.Equal(t, string(res.AppendMessageJSON(nil)), string(m.Data))
			back, err := pigeon.DecodeMessage(m.Data)
			require.NoError(t, err)
			require.Equal(t, uint32(2), back.Hops)
		})
	}
}
