package natsbridge

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// A JetStream In route's ids are nats-<stream>-<sequence>: on a stream
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
	require.Equal(t, id, jetStreamID(name, 1))
	require.NotEqual(t, id, jetStreamID(name[1:], 1))
}
