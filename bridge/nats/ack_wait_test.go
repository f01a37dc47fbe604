package natsbridge

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// A JetStream In route with a slow broker takes longer over one pull's
// batch than the consumer's ack wait: the messages that waited behind the
// one in hand were handed out again (to another bridge sharing the
// durable, here the test's own pull) while the route still held them, and
// published twice (harmless by their ids, but wasted). The route now keeps
// them (InProgress) while they wait.
func TestSlowBatchIsNotRedeliveredWhileHeld(t *testing.T) {
	v := newEnv(t)
	st := v.stream(t, "LEGACY", "legacy.>")
	const ackWait = 2 * time.Second
	cons, err := st.CreateConsumer(t.Context(), jetstream.ConsumerConfig{
		Durable: "orders-in", FilterSubject: "legacy.orders", AckPolicy: jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy, MaxDeliver: -1, AckWait: ackWait,
	})
	require.NoError(t, err)
	const n = 6
	for range n {
		_, err := v.js.Publish(t.Context(), "legacy.orders", []byte(`{"orderId":"o"}`))
		require.NoError(t, err)
	}
	b, err := New(Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "orders-in", Direction: In, Subject: ordersSubject, NATSSubject: "legacy.orders", JetStream: true, Stream: "LEGACY", Template: ordersTemplate},
	}})
	require.NoError(t, err)
	var handled atomic.Int64
	b.beforeJetStream = func(string) {
		handled.Add(1)
		time.Sleep(ackWait / 3) // a slow broker: the batch takes twice the ack wait
	}
	rb := startBridge(t, b)
	require.Eventually(t, func() bool { return handled.Load() > 0 }, 30*time.Second, 5*time.Millisecond)

	// A second puller on the durable, as a second bridge would be.
	taken := 0
	for routeStats(rb.b, "orders-in").Forwarded+routeStats(rb.b, "orders-in").Duplicates < n {
		batch, err := cons.Fetch(n, jetstream.FetchMaxWait(300*time.Millisecond))
		require.NoError(t, err)
		for range batch.Messages() {
			taken++ // left unacknowledged
		}
	}
	s := routeStats(rb.b, "orders-in")
	require.Zero(t, taken, "messages the route held were handed out again")
	require.EqualValues(t, n, s.Forwarded)
	require.Zero(t, s.Duplicates)
}
