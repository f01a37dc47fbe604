package natsbridge

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"pigeon"
)

// A stream drops a message as a duplicate of any message it took under
// the same Nats-Msg-Id within its duplicate window, on any of its subjects.
// A NATS client that may publish on one of them (a bridged In subject the
// stream also takes, say) could publish a Pigeon message's id first, and
// the Out route took the stream's answer "duplicate" for the message
// stored: the message never reached the stream, and the broker was told
// it had. The route counts a duplicate only when the message the stream
// holds under the id is the very one it publishes (on its NATS subject,
// the same envelope bytes); otherwise it publishes it without the id.
func TestOutJetStreamForeignMsgIDDoesNotSuppress(t *testing.T) {
	for _, tt := range []struct {
		name    string
		subject string // where the attacker publishes the id first
		header  nats.Header
	}{
		{"another subject of the stream", "in.orders", nil},
		{"the route's subject, its headers forged", "out.orders",
			nats.Header{HeaderSubject: {ordersSubject}, HeaderSequence: {"1"}, HeaderBridge: {"orders-out"}, HeaderResume: {"2"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := newEnv(t)
			st := v.stream(t, "BUS", "out.orders", "in.orders")
			rb := start(t, Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
				{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "out.orders", JetStream: true, Stream: "BUS"},
			}})

			h := nats.Header{}
			for k, vs := range tt.header {
				h[k] = vs
			}
			h.Set(HeaderMsgID, "order-42")
			_, err := v.js.PublishMsg(t.Context(), &nats.Msg{Subject: tt.subject, Header: h, Data: []byte(`{"forged":true}`)})
			require.NoError(t, err)

			m := order("o-42")
			m.ID = "order-42"
			res, err := publisher(t, v.e).Publish(t.Context(), m)
			require.NoError(t, err)

			require.Eventually(t, func() bool { return routeStats(rb.b, "orders-out").Forwarded == 1 }, 30*time.Second, 5*time.Millisecond,
				"the route carried the message (stats: %+v)", routeStats(rb.b, "orders-out"))
			require.Zero(t, routeStats(rb.b, "orders-out").Duplicates, "another's message under its id taken for its copy")
			got, err := st.GetLastMsgForSubject(t.Context(), "out.orders")
			require.NoError(t, err)
			require.Equal(t, string(res.AppendMessageJSON(nil)), string(got.Data), "the stream holds the message the gates judged")
			require.Equal(t, ordersSubject, got.Header.Get(HeaderSubject))
			require.Equal(t, "orders-out", got.Header.Get(HeaderBridge))
		})
	}
}

// A repeat of a message the route stored already (a redelivery after a
// lost acknowledgement, a second bridge on the route) is still dropped by
// the stream and counted a duplicate.
func TestOutJetStreamOwnRepeatIsADuplicate(t *testing.T) {
	v := newEnv(t)
	st := v.stream(t, "BUS", "out.orders")
	b, err := New(Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "out.orders", JetStream: true, Stream: "BUS"},
	}})
	require.NoError(t, err)
	o := b.routes[0].(*outRoute)
	js, err := jetstream.New(v.nc)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	g := &generation{nc: v.nc, js: js, ctx: ctx, cancel: cancel, failed: make(chan struct{})}
	m := order("o-1")
	m.ID, m.Sequence, m.Source = "order-1", 1, appPrin
	d := &pigeon.Delivery{Subject: ordersSubject, Message: m, Attempt: 1}
	for range 2 {
		require.NoError(t, o.publish(ctx, g, d, 2))
	}
	require.EqualValues(t, 1, routeStats(b, "orders-out").Duplicates)
	info, err := st.Info(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 1, info.State.Msgs, "the repeat is not stored")
}

// Two Out routes that carry one Pigeon subject into two NATS subjects of
// one stream publish each message under one Nats-Msg-Id: the stream took
// the first route's and answered the second's "duplicate", so the second
// NATS subject never had the message. Each subject now holds it.
func TestOutJetStreamTwoRoutesIntoOneStream(t *testing.T) {
	v := newEnv(t)
	st := v.stream(t, "BUS", "out.a", "out.b")
	rb := start(t, Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "to-a", Direction: Out, Subject: ordersSubject, NATSSubject: "out.a", JetStream: true, Stream: "BUS"},
		{Name: "to-b", Direction: Out, Subject: ordersSubject, NATSSubject: "out.b", JetStream: true, Stream: "BUS"},
	}})
	res, err := publisher(t, v.e).Publish(t.Context(), order("o-1"))
	require.NoError(t, err)
	for _, r := range []string{"to-a", "to-b"} {
		require.Eventually(t, func() bool { return routeStats(rb.b, r).Forwarded == 1 }, 30*time.Second, 5*time.Millisecond, "route %s", r)
	}
	for _, subject := range []string{"out.a", "out.b"} {
		got, err := st.GetLastMsgForSubject(t.Context(), subject)
		require.NoError(t, err, "the stream holds the message on %s", subject)
		require.Equal(t, string(res.AppendMessageJSON(nil)), string(got.Data))
	}
}
