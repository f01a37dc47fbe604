package natsbridge

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"pigeon"
)

// A JetStream In route's ids are nats-<stream>/<durable>-<created>-<sequence>: on a stream
// whose name is longer than about 230 bytes (JetStream takes 255) every id
// was longer than an envelope's id may be, and every message was refused
// ENVELOPE_INVALID and terminated, lost.
func TestInJetStreamLongStreamName(t *testing.T) {
	v := newEnv(t)
	name := strings.Repeat("S", 255)
	v.stream(t, name, "legacy.>")
	got := subscribe(t, v.e, monitorToken, ordersSubject)
	rb := start(t, Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "orders-in", Direction: In, Subject: ordersSubject, NATSSubject: "legacy.orders", JetStream: true, Stream: name, Template: ordersTemplate},
	}})
	_, err := v.js.PublishMsg(t.Context(), &nats.Msg{Subject: "legacy.orders", Data: []byte(`{"orderId":"l-1","amount":3}`)})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		s := routeStats(rb.b, "orders-in")
		return s.Forwarded+uint64(len(s.Refused)) > 0
	}, 30*time.Second, 5*time.Millisecond)
	s := routeStats(rb.b, "orders-in")
	require.Empty(t, s.Refused)
	require.EqualValues(t, 1, s.Forwarded)
	require.Eventually(t, func() bool { return len(got.all()) == 1 }, 30*time.Second, 5*time.Millisecond)
	id := got.all()[0].ID
	require.True(t, strings.HasPrefix(id, "nats-sha256:") && strings.HasSuffix(id, "-1"), id)
	// A redelivery is recognised: the id is the stream's and sequence's.
	require.Equal(t, id, v.jsID(t, name, "orders-in", 1))
	created := time.Unix(0, 1<<62)
	require.NotEqual(t, jetStreamID(name, "d", created, 1), jetStreamID(name[1:], "d", created, 1))
	require.NotEqual(t, jetStreamID(name, "d", created, 1), jetStreamID(name, "e", created, 1))
	require.LessOrEqual(t, len(jetStreamID(name, strings.Repeat("D", 255), created, 1<<63)), pigeon.MaxEnvelopeField)
}

// A stream deleted and created again under its name numbers its messages
// from 1 again. Its messages' ids were those of the first stream's
// messages (nats-<stream>-<sequence>), so the broker, still holding those,
// answered MESSAGE_ID_TAKEN, and the bridge took each new message for a
// redelivery, acknowledged it and dropped it. The stream's creation time
// is in the ids now.
func TestInJetStreamStreamCreatedAgain(t *testing.T) {
	v := newEnv(t)
	got := subscribe(t, v.e, monitorToken, ordersSubject)
	opts := Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "orders-in", Direction: In, Subject: ordersSubject, NATSSubject: "legacy.orders", JetStream: true, Stream: "LEGACY", Template: ordersTemplate},
	}}
	publish := func(orders ...string) {
		for _, o := range orders {
			_, err := v.js.Publish(t.Context(), "legacy.orders", []byte(`{"orderId":"`+o+`"}`))
			require.NoError(t, err)
		}
	}
	v.stream(t, "LEGACY", "legacy.>")
	publish("first-1", "first-2")
	rb := start(t, opts)
	require.Eventually(t, func() bool { return len(got.all()) == 2 }, 30*time.Second, 5*time.Millisecond)
	rb.stop(t)

	require.NoError(t, v.js.DeleteStream(t.Context(), "LEGACY"))
	v.stream(t, "LEGACY", "legacy.>")
	publish("second-1", "second-2")
	rb = start(t, opts)
	require.Eventually(t, func() bool {
		s := routeStats(rb.b, "orders-in")
		return s.Forwarded+s.Duplicates == 2
	}, 30*time.Second, 5*time.Millisecond)
	require.Zero(t, routeStats(rb.b, "orders-in").Duplicates, "new messages taken for redeliveries")
	require.Eventually(t, func() bool { return len(got.all()) == 4 }, 30*time.Second, 5*time.Millisecond)
}

// A stream deleted and created again while the route runs: the route's
// consumer went with the first stream, and its pulls failed for ever (only
// a debug line said so) until the bridge was restarted. The route binds
// its consumer again, on the new stream, and goes on.
func TestInJetStreamStreamCreatedAgainWhileRunning(t *testing.T) {
	v := newEnv(t)
	got := subscribe(t, v.e, monitorToken, ordersSubject)
	publish := func(orders ...string) {
		for _, o := range orders {
			_, err := v.js.Publish(t.Context(), "legacy.orders", []byte(`{"orderId":"`+o+`"}`))
			require.NoError(t, err)
		}
	}
	v.stream(t, "LEGACY", "legacy.>")
	publish("first-1")
	rb := start(t, Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "orders-in", Direction: In, Subject: ordersSubject, NATSSubject: "legacy.orders", JetStream: true, Stream: "LEGACY", Template: ordersTemplate},
	}})
	require.Eventually(t, func() bool { return len(got.all()) == 1 }, 30*time.Second, 5*time.Millisecond)

	require.NoError(t, v.js.DeleteStream(t.Context(), "LEGACY"))
	v.stream(t, "LEGACY", "legacy.>")
	publish("second-1", "second-2")
	require.Eventually(t, func() bool { return len(got.all()) == 3 }, 30*time.Second, 5*time.Millisecond)
	require.Zero(t, routeStats(rb.b, "orders-in").Duplicates)
}
