package natsbridge

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/policy"
)

// A delivery that NATS never takes (larger than the server's max_payload,
// or than the stream's max_msg_size) is given up by the broker once its attempts run out. The
// Out route, one delivery in flight, then carries the next message; a new
// session resumes after that one, not at the message given up: otherwise
// every later session would publish again everything since it (core NATS
// subscribers get each of them once more per session), and the route
// would hold its sequence forever.
func TestOutGivenUpDeliveryIsNotReplayed(t *testing.T) {
	for _, jsMode := range []bool{false, true} {
		t.Run("jetstream="+strconv.FormatBool(jsMode), func(t *testing.T) { testOutGivenUp(t, jsMode) })
	}
}

// ordersEngine is a broker with orders.events under subjectPolicy, its
// redeliveries retryBase apart.
func ordersEngine(t *testing.T, subjectPolicy string, retryBase time.Duration) *pigeon.Engine {
	cat := demo.Catalog()
	sp, err := policy.ParseSubject("orders.events.json", []byte(subjectPolicy))
	require.NoError(t, err)
	cat.Subjects = append(cat.Subjects, sp)
	e, err := pigeon.New(t.Context(), &pigeon.Options{Authenticator: pigeon.NewStaticTokens(
		pigeon.StaticToken{Token: bridgeToken, Principal: bridgePrin}, pigeon.StaticToken{Token: appToken, Principal: appPrin}),
		Catalog: cat, Region: "uk", RetryBase: retryBase})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	return e
}

func testOutGivenUp(t *testing.T, jsMode bool) {
	e := ordersEngine(t, strings.Replace(ordersPolicy, `"maxAttempts": 1000`, `"maxAttempts": 2`, 1), 20*time.Millisecond)

	sopts := &server.Options{Host: "127.0.0.1", Port: -1, MaxPayload: 2048, NoLog: true, NoSigs: true}
	if jsMode {
		sopts.MaxPayload, sopts.JetStream, sopts.StoreDir = 0, true, t.TempDir()
	}
	ns, err := server.NewServer(sopts)
	require.NoError(t, err)
	ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	nc, tc := connectNATS(t, ns.ClientURL(), 20*time.Millisecond), connectNATS(t, ns.ClientURL(), 20*time.Millisecond)
	sub, err := tc.SubscribeSync("bridge.orders")
	require.NoError(t, err)
	require.NoError(t, tc.Flush())
	if jsMode {
		js, err := jetstream.New(tc)
		require.NoError(t, err)
		_, err = js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"bridge.orders"}, MaxMsgSize: 2048})
		require.NoError(t, err)
	}

	front := newWSFront(t, e)
	rb := start(t, Options{Dialer: wsDialer(front), Credential: bridgeToken, NATS: nc, Routes: []Route{
		{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "bridge.orders", JetStream: jsMode},
	}})
	pub := publisher(t, e)
	big := order("big")
	big.Data = []byte(`{"orderId":"big","note":"` + strings.Repeat("x", 4096) + `"}`)
	_, err = pub.Publish(t.Context(), big)
	require.NoError(t, err)
	var forwarded uint64
	next := func(n string) {
		t.Helper()
		_, err := pub.Publish(t.Context(), order(n))
		require.NoError(t, err)
		for {
			m, err := sub.NextMsg(30 * time.Second)
			require.NoError(t, err)
			back, err := pigeon.DecodeMessage(m.Data)
			require.NoError(t, err)
			if jsMode && strings.Contains(string(back.Data), `"orderId":"big"`) {
				continue // a core subscriber sees what the stream refuses
			}
			var d struct{ OrderID string }
			require.NoError(t, json.Unmarshal(back.Data, &d))
			require.Equal(t, n, d.OrderID)
			forwarded++
			require.Eventually(t, func() bool { return routeStats(rb.b, "orders-out").Forwarded == forwarded }, 30*time.Second, 5*time.Millisecond)
			return
		}
	}
	next("o-1") // carried once the broker gave the big one up
	require.Eventually(t, func() bool { return routeStats(rb.b, "orders-out").Retried == 2 }, 30*time.Second, 5*time.Millisecond, "two attempts at the big one")

	for i := range 2 {
		sessions := rb.b.Stats().Sessions
		front.cut(t)
		require.Eventually(t, func() bool { return rb.b.Stats().Sessions > sessions && rb.b.Stats().Connected }, 30*time.Second, 5*time.Millisecond)
		next("o-" + strconv.Itoa(i+2)) // the next one NATS gets is the new message, not o-1 again
	}
	require.Equal(t, uint64(2), routeStats(rb.b, "orders-out").Retried, "the big one is not tried again")
}

// With one delivery in flight, the next message may be handed over while
// one that failed waits for its retry (it is, over WebSocket). A bridge that stops before
// that retry must not start the next time after the stream's last
// message, which came later: it resumes at the message still to be
// carried (its Pigeon-Resume header), or that message would never reach
// the stream.
func TestOutJetStreamRestartDoesNotSkipAPendingRetry(t *testing.T) {
	v := newEnv(t)
	v.e = ordersEngine(t, ordersPolicy, 2*time.Second) // a's retry comes after b
	cfg := jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.orders"}}
	st := v.stream(t, cfg.Name, cfg.Subjects...)
	opts := Options{Dialer: transports[1].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "out.orders", JetStream: true, Stream: "OUT"},
	}}
	pub := publisher(t, v.e)
	first, err := New(opts)
	require.NoError(t, err)
	var a, b string
	published := make(chan struct{})
	attemptsA := 0
	first.beforeOut = func(ctx context.Context, _, id string) {
		<-published
		switch id {
		case a:
			if attemptsA++; attemptsA == 1 {
				assert.NoError(t, v.js.DeleteStream(context.Background(), cfg.Name)) // a fails
				return
			}
			select { // its retry comes once the bridge stops
			case <-ctx.Done():
			case <-first.stop:
			}
			time.Sleep(200 * time.Millisecond)
		case b:
			var err error
			st, err = v.js.CreateStream(context.Background(), cfg) // b is stored
			assert.NoError(t, err)
		}
	}
	rb := startBridge(t, first)
	resA, err := pub.Publish(t.Context(), order("a"))
	require.NoError(t, err)
	resB, err := pub.Publish(t.Context(), order("b"))
	require.NoError(t, err)
	a, b = resA.Message.ID, resB.Message.ID
	close(published)
	require.Eventually(t, func() bool { return routeStats(first, "orders-out").Forwarded == 1 }, 30*time.Second, 5*time.Millisecond, "b is stored")
	rb.stop(t)
	m, err := st.GetLastMsgForSubject(t.Context(), "out.orders")
	require.NoError(t, err)
	require.Equal(t, b, m.Header.Get(HeaderMsgID), "a is not in the stream yet")

	start(t, opts)
	require.Eventually(t, func() bool {
		for seq := uint64(1); ; seq++ {
			m, err := st.GetMsg(t.Context(), seq)
			if err != nil {
				return false
			}
			if m.Header.Get(HeaderMsgID) == a {
				return true
			}
		}
	}, 10*time.Second, 20*time.Millisecond, "the next bridge carries a")
}
