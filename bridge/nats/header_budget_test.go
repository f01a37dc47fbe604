package natsbridge

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// headerHeavy is a NATS message on subject of about size bytes, nearly all
// of them distinct small headers: nats.go decodes them on arrival into a
// map of about headerAmplification times their size.
func headerHeavy(subject string, size int) *nats.Msg {
	m := &nats.Msg{Subject: subject, Header: nats.Header{}, Data: []byte(`{"orderId":"h"}`)}
	for i, n := 0, 0; n < size; i++ {
		k := strconv.FormatInt(int64(i), 36)
		m.Header[k] = []string{"x"}
		n += len(k) + len(": x\r\n")
	}
	return m
}

// heapAfterGC is the live heap.
func heapAfterGC() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// slack is room for the rest of the process in a measure of the heap.
const slack = 16 << 20

// A core NATS In route whose broker is slow holds what waits within its
// pending bound in bytes, but nats.go decodes each message's headers on
// arrival, before the bound applies, at about 16 times their size: at
// 64 MiB, header-heavy messages from a NATS publisher held about 1 GiB of
// the bridge's memory. The bound is now 4 MiB, and the memory the route
// holds stays within 16 times that.
func TestCoreHeaderHeavyMessagesStayWithinTheBudget(t *testing.T) {
	v := newEnv(t)
	b, err := New(Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "core-in", Direction: In, Subject: ordersSubject, NATSSubject: "legacy.core", Template: ordersTemplate},
	}})
	require.NoError(t, err)
	rb, waiting, release := startStalled(t, b, &b.beforeCore)
	require.NoError(t, v.tc.Publish("legacy.core", []byte(`{"orderId":"first"}`)))
	require.Eventually(t, waiting, 30*time.Second, 5*time.Millisecond)

	const n = 12
	m := headerHeavy("legacy.core", int(v.nc.MaxPayload())-64<<10)
	in0 := v.nc.Stats().InMsgs
	base := heapAfterGC()
	for range n {
		require.NoError(t, v.tc.PublishMsg(m))
	}
	require.NoError(t, v.tc.FlushTimeout(30*time.Second))
	require.Eventually(t, func() bool { return v.nc.Stats().InMsgs-in0 == n }, 30*time.Second, 5*time.Millisecond,
		"the bridge's connection received every message")
	after := heapAfterGC()
	held := after - min(base, after)
	t.Logf("%d messages of %d bytes: %d MiB held", n, m.Size(), held>>20)
	require.LessOrEqual(t, held, uint64(coreMemoryBudget)+slack, "the route holds more than its budget")
	runtime.KeepAlive(m)

	release()
	require.Eventually(t, func() bool {
		s := routeStats(rb.b, "core-in")
		return s.Forwarded+s.Dropped == n+1
	}, 30*time.Second, 5*time.Millisecond)
	require.NotZero(t, routeStats(rb.b, "core-in").Dropped)
}

// A JetStream In route holds one pull's messages, bounded in bytes
// (fetchBytes) and in number (fetchBatch). Their headers are decoded on
// arrival at up to 16 times their size, but a stream stores no header
// block of 64 KiB or more (it refuses the publish): a pull of header-heavy
// messages holds at most fetchBatch times 1 MiB of them, besides
// fetchBytes: about 40 MiB. This guards that budget: a larger batch or
// byte bound breaks it.
func TestJetStreamHeaderHeavyPullStaysWithinTheBudget(t *testing.T) {
	v := newEnv(t)
	st := v.stream(t, "LEGACY", "legacy.>")
	_, err := v.js.PublishMsg(t.Context(), headerHeavy("legacy.orders", maxStoredHeaders+1))
	require.ErrorContains(t, err, "header size", "the stream refuses a header block of 64 KiB")
	const n = fetchBatch + 8
	m := headerHeavy("legacy.orders", maxStoredHeaders-1<<10)
	for range n {
		_, err := v.js.PublishMsg(t.Context(), m)
		require.NoError(t, err)
	}
	b, err := New(Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "orders-in", Direction: In, Subject: ordersSubject, NATSSubject: "legacy.orders", JetStream: true, Stream: "LEGACY", Template: ordersTemplate},
	}})
	require.NoError(t, err)
	base := heapAfterGC()
	in0 := v.nc.Stats().InMsgs
	rb, waiting, release := startStalled(t, b, &b.beforeJetStream)
	require.Eventually(t, waiting, 30*time.Second, 5*time.Millisecond)
	// The pull is over when the connection received what the consumer
	// handed out.
	var handedOut int
	require.Eventually(t, func() bool {
		handedOut = ackPending(t, st, "orders-in")
		return handedOut > 0 && v.nc.Stats().InMsgs-in0 >= uint64(handedOut)
	}, 30*time.Second, 5*time.Millisecond)
	after := heapAfterGC()
	held := after - min(base, after)
	t.Logf("%d of %d messages of %d bytes handed out: %d MiB held", handedOut, n, m.Size(), held>>20)
	require.LessOrEqual(t, handedOut, fetchBatch)
	const budget = 40 << 20 // fetchBytes, and fetchBatch header blocks decoded (docs/bridges.md)
	require.LessOrEqual(t, held, uint64(budget)+slack, "the route holds more than its budget")

	release()
	require.Eventually(t, func() bool { return routeStats(rb.b, "orders-in").Forwarded == n }, 60*time.Second, 5*time.Millisecond)
}
