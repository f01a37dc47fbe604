package natsbridge

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// bigPayload is a JSON object of n bytes.
func bigPayload(n int) []byte {
	return []byte(`{"pad":"` + strings.Repeat("x", n-10) + `"}`)
}

// A NATS message that the NATS server takes (under its max_payload) but
// that makes a frame larger than the broker's WebSocket server reads is
// refused PAYLOAD_TOO_LARGE and terminated, like any refusal; it does not
// cut the bridge's connection to the broker, again at each redelivery
// (JetStream redelivers it for ever), taking every route down with it.
func TestInOversizedMessageIsRefused(t *testing.T) {
	v := newEnv(t)
	v.stream(t, "BIG", "big.orders")
	got := subscribe(t, v.e, monitorToken, ordersSubject)
	front := newWSFront(t, v.e)
	rb := start(t, Options{Dialer: wsDialer(front), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "big-in", Direction: In, Subject: ordersSubject, NATSSubject: "big.orders", JetStream: true, Stream: "BIG", Template: ordersTemplate},
	}})
	max := int(v.nc.MaxPayload())
	_, err := v.js.Publish(t.Context(), "big.orders", bigPayload(max-200))
	require.NoError(t, err)
	_, err = v.js.Publish(t.Context(), "big.orders", []byte(`{"orderId":"after"}`))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		s := routeStats(rb.b, "big-in")
		return s.Forwarded+s.Refused[pigeon.CodePayloadTooLarge] == 2 || rb.b.Stats().Sessions > 3
	}, 30*time.Second, 5*time.Millisecond)
	s := routeStats(rb.b, "big-in")
	require.Equal(t, uint64(1), rb.b.Stats().Sessions, "the session was never lost")
	require.Equal(t, map[pigeon.Code]uint64{pigeon.CodePayloadTooLarge: 1}, s.Refused)
	require.Equal(t, uint64(1), s.Forwarded)
	require.Eventually(t, func() bool { return len(got.all()) == 1 }, 30*time.Second, 5*time.Millisecond)
}

// Data nesting deeper than the broker reads (pigeon.MaxJSONDepth) is
// refused ENVELOPE_INVALID by the bridge, plain or in an envelope: the
// broker's WebSocket server leaves a frame nesting deeper than it reads
// unanswered, so such a message would time out and be given back, again
// and again, each time holding the route for PublishTimeout.
func TestInTooDeepDataIsRefused(t *testing.T) {
	v := newEnv(t)
	v.stream(t, "DEEP", "deep.orders")
	front := newWSFront(t, v.e)
	rb := start(t, Options{Dialer: wsDialer(front), Credential: bridgeToken, NATS: v.nc, PublishTimeout: 2 * time.Second, Routes: []Route{
		{Name: "deep-in", Direction: In, Subject: ordersSubject, NATSSubject: "deep.orders", JetStream: true, Stream: "DEEP", Template: ordersTemplate},
	}})
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	envelope := func(n int) string {
		return `{"type":"order.created","intent":"order_event","data":` + nest(n) + `}`
	}
	payloads := []string{nest(63), nest(64), nest(65), nest(70), nest(71), nest(72), envelope(64), envelope(65), envelope(71)}
	for _, p := range payloads {
		_, err := v.js.Publish(t.Context(), "deep.orders", []byte(p))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		s := routeStats(rb.b, "deep-in")
		return s.Forwarded+s.Refused[pigeon.CodeEnvelopeInvalid] == uint64(len(payloads)) || s.Retried > 0
	}, 30*time.Second, 5*time.Millisecond)
	s := routeStats(rb.b, "deep-in")
	require.Zero(t, s.Retried, "no publish went unanswered")
	require.Equal(t, uint64(3), s.Forwarded)
	require.Equal(t, map[pigeon.Code]uint64{pigeon.CodeEnvelopeInvalid: 6}, s.Refused)
}

// A core NATS In route that does not keep up (the broker slow to answer)
// holds a bounded number of bytes waiting, not a number of messages of any
// size: beyond the bound NATS drops what comes, counted Dropped, rather
// than the bridge's memory filling with max_payload-sized messages.
func TestInCorePendingIsBoundedInBytes(t *testing.T) {
	was := corePendingBytes
	corePendingBytes = 300 << 10
	t.Cleanup(func() { corePendingBytes = was })
	v := newEnv(t)
	b, err := New(Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "core-in", Direction: In, Subject: ordersSubject, NATSSubject: "legacy.core", Template: ordersTemplate},
	}})
	require.NoError(t, err)
	const n = 10
	in0 := v.nc.Stats().InMsgs
	rb, waiting, release := startStalled(t, b, &b.beforeCore)
	require.NoError(t, v.tc.Publish("legacy.core", []byte(`{"orderId":"first"}`)))
	require.Eventually(t, waiting, 30*time.Second, 5*time.Millisecond)
	for range n {
		require.NoError(t, v.tc.Publish("legacy.core", bigPayload(100<<10)))
	}
	require.NoError(t, v.tc.Flush())
	require.Eventually(t, func() bool { return v.nc.Stats().InMsgs-in0 == n+1 }, 30*time.Second, 5*time.Millisecond,
		"the bridge's connection received every message")
	release()
	require.Eventually(t, func() bool {
		s := routeStats(rb.b, "core-in")
		return s.Forwarded+s.Dropped == n+1
	}, 30*time.Second, 5*time.Millisecond)
	s := routeStats(rb.b, "core-in")
	require.LessOrEqual(t, s.Forwarded, uint64(1+3), "at most 300 KiB of 100 KiB messages waited")
	require.GreaterOrEqual(t, s.Dropped, uint64(n-3))
}

// A JetStream In route pulls a bounded number of bytes at once, not a
// number of messages of any size: a pull asked for 32 messages, which at
// NATS's largest max_payload (64 MiB) was 2 GiB in the bridge's memory.
// While the route waits on its first message, the consumer has handed out
// only what fits in the byte bound (each pull at least one message of the
// largest size the server takes).
func TestInJetStreamPullIsBoundedInBytes(t *testing.T) {
	was := fetchBytes
	fetchBytes = 300 << 10
	t.Cleanup(func() { fetchBytes = was })
	v := newEnv(t)
	st := v.stream(t, "LEGACY", "legacy.>")
	const n = 10
	for range n {
		_, err := v.js.Publish(t.Context(), "legacy.orders", bigPayload(100<<10))
		require.NoError(t, err)
	}
	b, err := New(Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "orders-in", Direction: In, Subject: ordersSubject, NATSSubject: "legacy.orders", JetStream: true, Stream: "LEGACY", Template: ordersTemplate},
	}})
	require.NoError(t, err)
	rb, waiting, release := startStalled(t, b, &b.beforeJetStream)
	require.Eventually(t, waiting, 30*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return ackPending(t, st, "orders-in") > 0 }, 30*time.Second, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // a pull that took more would have by now
	require.LessOrEqual(t, ackPending(t, st, "orders-in"), 3, "at most 300 KiB of 100 KiB messages handed out at once")
	release()
	require.Eventually(t, func() bool { return routeStats(rb.b, "orders-in").Forwarded == n }, 30*time.Second, 5*time.Millisecond)
}

// A JetStream message larger than the bound of a pull (fetchBytes) is
// pulled alone rather than never: the server refuses a pull whose bound
// its next message exceeds, which would stop the route at that message.
func TestInJetStreamMessageLargerThanThePullBound(t *testing.T) {
	was := fetchBytes
	fetchBytes = 50 << 10
	t.Cleanup(func() { fetchBytes = was })
	v := newEnv(t)
	v.stream(t, "LEGACY", "legacy.>")
	for _, size := range []int{10 << 10, 100 << 10, 10 << 10, 100 << 10, 100 << 10, 10 << 10} {
		_, err := v.js.Publish(t.Context(), "legacy.orders", bigPayload(size))
		require.NoError(t, err)
	}
	rb := start(t, Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "orders-in", Direction: In, Subject: ordersSubject, NATSSubject: "legacy.orders", JetStream: true, Stream: "LEGACY", Template: ordersTemplate},
	}})
	require.Eventually(t, func() bool { return routeStats(rb.b, "orders-in").Forwarded == 6 }, 30*time.Second, 5*time.Millisecond)
}
