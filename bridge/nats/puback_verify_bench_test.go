package natsbridge

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"pigeon"
)

// BenchmarkOutJetStreamPublish is the cost of reading each PubAck
// back (verify) against a JetStream publish alone, on an embedded server.
func BenchmarkOutJetStreamPublish(b *testing.B) {
	for _, direct := range []bool{false, true} {
		v := newEnv(b)
		_, err := v.js.CreateStream(b.Context(), jetstream.StreamConfig{Name: "BUS", Subjects: []string{"out.orders"}, AllowDirect: direct})
		require.NoError(b, err)
		br, err := New(Options{Dialer: transports[0].dialer(b, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
			{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "out.orders", JetStream: true, Stream: "BUS", MaxInFlight: 2},
		}})
		require.NoError(b, err)
		o := br.routes[0].(*outRoute)
		js, err := jetstream.New(v.nc)
		require.NoError(b, err)
		ctx, cancel := context.WithCancel(b.Context())
		g := &generation{nc: v.nc, js: js, ctx: ctx, cancel: cancel, failed: make(chan struct{})}
		m := order("o-1")
		m.Sequence, m.Source = 1, appPrin
		d := &pigeon.Delivery{Subject: ordersSubject, Message: m, Attempt: 1}
		name := map[bool]string{false: "msg-get", true: "direct-get"}[direct]
		b.Run(name+"/PubAck-only", func(b *testing.B) {
			for b.Loop() {
				_, err := js.PublishMsg(ctx, &nats.Msg{Subject: "out.orders", Data: d.AppendMessageJSON(nil)})
				require.NoError(b, err)
			}
		})
		b.Run(name+"/read-back", func(b *testing.B) {
			for b.Loop() {
				m.ID = ""
				require.NoError(b, o.publish(ctx, g, d, 0))
			}
		})
		cancel()
	}
}
