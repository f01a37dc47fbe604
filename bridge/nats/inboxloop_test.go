package natsbridge

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// An In route whose NATS subject starts with a wildcard (">") also matched
// the bridge's own NATS traffic: the stream's PubAck of each message an
// Out route published (on the connection's reply inbox, _INBOX.…), and
// the JetStream API requests ($JS.API.…). Each PubAck was carried into
// Pigeon as a message, which the Out route carried to the stream, whose
// PubAck came back in: an endless loop, thousands of messages a second
// from one publish.
func TestInWildcardDoesNotCarryTheBridgesOwnTraffic(t *testing.T) {
	v := newEnv(t)
	v.stream(t, "ORDERS", "bridge.orders")
	got := subscribe(t, v.e, monitorToken, ordersSubject)
	rb := start(t, Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "all-in", Direction: In, Subject: ordersSubject, NATSSubject: ">", Template: ordersTemplate},
		{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "bridge.orders", JetStream: true, Stream: "ORDERS"},
	}})
	_, err := publisher(t, v.e).Publish(t.Context(), order("o-1"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return routeStats(rb.b, "orders-out").Forwarded >= 1 }, 30*time.Second, 5*time.Millisecond)
	// The PubAck reached the bridge's connection before this message: the
	// In route has handled it when this one is in.
	require.NoError(t, v.tc.Publish("legacy.orders", []byte(`{"orderId":"l-1","amount":3}`)))
	isL1 := func(m *pigeon.Message) bool { return strings.Contains(string(m.Data), `"l-1"`) }
	require.Eventually(t, func() bool {
		for _, m := range got.all() {
			if isL1(m) {
				return true
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond)
	for _, m := range got.all() {
		if m.Source == bridgePrin {
			require.True(t, isL1(m), "the bridge carried in its own traffic: %s", m.Data)
		}
	}
	// The route counts its pass once the broker has answered, which can
	// come after the subscriber above got the message.
	require.Eventually(t, func() bool { return routeStats(rb.b, "all-in").Forwarded == 1 }, 30*time.Second, 5*time.Millisecond,
		"all-in forwarded %d", routeStats(rb.b, "all-in").Forwarded)
}
