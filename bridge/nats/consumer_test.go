package natsbridge

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"pigeon"
)

// An existing durable consumer that delivers headers only (HeadersOnly)
// hands the bridge messages without their payload: the route would
// publish each as an empty message and acknowledge it, and the data would
// be lost. The bridge refuses to start on it, as on a consumer that
// filters on another subject.
func TestInRefusesHeadersOnlyConsumer(t *testing.T) {
	v := newEnv(t)
	st := v.stream(t, "LEGACY", "legacy.>")
	_, err := st.CreateConsumer(t.Context(), jetstream.ConsumerConfig{Durable: "orders-in", FilterSubject: "legacy.orders",
		AckPolicy: jetstream.AckExplicitPolicy, HeadersOnly: true})
	require.NoError(t, err)
	_, err = v.js.Publish(t.Context(), "legacy.orders", []byte(`{"orderId":"o-1","amount":3}`))
	require.NoError(t, err)
	got := subscribe(t, v.e, monitorToken, ordersSubject)
	b, err := New(Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "orders-in", Direction: In, Subject: ordersSubject, NATSSubject: "legacy.orders", JetStream: true, Stream: "LEGACY", Template: ordersTemplate},
	}})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- b.Run(t.Context()) }()
	t.Cleanup(func() { _ = b.Shutdown(t.Context()) })
	select {
	case err := <-done:
		require.Equal(t, pigeon.CodeInvalidArgument, code(t, err))
		require.Contains(t, err.Error(), "orders-in")
	case <-time.After(30 * time.Second):
		t.Fatalf("the bridge started on a headers-only consumer; the subscriber got %d messages", len(got.all()))
	}
	require.Empty(t, got.all())
}

// The consumer is checked when a session starts; deleted and created
// again under its name while the session runs, by one that filters on
// other subjects, it would hand the route other subjects' messages to
// publish on its Pigeon subject and acknowledge. The route publishes none
// of them, and the next session finds the consumer wrong and stops the
// bridge.
func TestInConsumerReplacedMidSession(t *testing.T) {
	for _, tt := range []struct {
		name    string
		cfg     jetstream.ConsumerConfig
		subject string
	}{
		{"other subjects", jetstream.ConsumerConfig{Durable: "orders-in", FilterSubject: "legacy.>", AckPolicy: jetstream.AckExplicitPolicy}, "legacy.payroll"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := newEnv(t)
			st := v.stream(t, "LEGACY", "legacy.>")
			got := subscribe(t, v.e, monitorToken, ordersSubject)
			b, err := New(Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
				{Name: "orders-in", Direction: In, Subject: ordersSubject, NATSSubject: "legacy.orders", JetStream: true, Stream: "LEGACY", Template: ordersTemplate},
			}})
			require.NoError(t, err)
			rb := startBridge(t, b)
			_, err = v.js.Publish(t.Context(), "legacy.orders", []byte(`{"orderId":"o-1"}`))
			require.NoError(t, err)
			require.Eventually(t, func() bool { return len(got.all()) == 1 }, 30*time.Second, 5*time.Millisecond)

			require.NoError(t, st.DeleteConsumer(t.Context(), "orders-in"))
			_, err = st.CreateConsumer(t.Context(), tt.cfg)
			require.NoError(t, err)
			_, err = v.js.Publish(t.Context(), tt.subject, []byte(`{"orderId":"o-2"}`))
			require.NoError(t, err)
			err = rb.wait(t, 30*time.Second)
			require.Equal(t, pigeon.CodeInvalidArgument, code(t, err))
			require.Len(t, got.all(), 1, "nothing the replaced consumer handed over was published")
		})
	}
}
