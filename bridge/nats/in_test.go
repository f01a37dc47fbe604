package natsbridge

import (
	"context"
	"encoding/json"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

var ordersTemplate = Template{Type: "order.created", Intent: "order_event", Classification: "internal"}

// An In route publishes each NATS message through the bridge's session:
// plain data under the template, an envelope as one, always on the route's
// subject and from the bridge's principal, with an id from the NATS side.
func TestIn(t *testing.T) {
	for _, tr := range transports {
		for _, jsMode := range []bool{false, true} {
			t.Run(tr.name+"/jetstream="+strconv.FormatBool(jsMode), func(t *testing.T) {
				v := newEnv(t)
				route := Route{Name: "orders-in", Direction: In, Subject: ordersSubject, NATSSubject: "legacy.orders", Template: ordersTemplate}
				if jsMode {
					v.stream(t, "LEGACY", "legacy.>")
					route.JetStream, route.Stream = true, "LEGACY"
				}
				got := subscribe(t, v.e, monitorToken, ordersSubject)
				rb := start(t, Options{Dialer: tr.dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{route}})

				payloads := []struct{ id, data string }{
					{"hdr-1", `{"orderId":"p-1","amount":3}`},
					{"hdr-2", `{"specversion":"1.0","id":"theirs","type":"order.paid","intent":"order_event","subject":"payments.authorize",` +
						`"source":"spiffe://merchant-prod/ns/payments/sa/gateway-adapter","data":{"orderId":"e-1"}}`},
					{"hdr-1", `{"orderId":"p-1","amount":3}`}, // the publisher's retry
				}
				for _, p := range payloads {
					m := &nats.Msg{Subject: "legacy.orders", Header: nats.Header{"Nats-Msg-Id": []string{p.id}}, Data: []byte(p.data)}
					if jsMode {
						_, err := v.js.PublishMsg(t.Context(), m)
						require.NoError(t, err)
					} else {
						require.NoError(t, v.tc.PublishMsg(m))
					}
				}
				// JetStream de-duplicates the retry itself, by Nats-Msg-Id;
				// on core NATS the broker recognises it by its id.
				require.Eventually(t, func() bool {
					s := routeStats(rb.b, "orders-in")
					return s.Forwarded == 2 && (jsMode || s.Duplicates == 1)
				}, 30*time.Second, 5*time.Millisecond)
				require.Eventually(t, func() bool { return len(got.all()) == 2 }, 30*time.Second, 5*time.Millisecond)
				time.Sleep(50 * time.Millisecond)
				msgs := got.all()
				require.Len(t, msgs, 2, "each message once")

				ids := []string{"nats:orders-in:hdr-1", "nats:orders-in:hdr-2"} // the publisher's ids, within the route
				if jsMode {
					ids = []string{v.jsID(t, "LEGACY", "orders-in", 1), v.jsID(t, "LEGACY", "orders-in", 2)}
				}
				plain, env := msgs[0], msgs[1]
				require.Equal(t, ids[0], plain.ID)
				require.Equal(t, "order.created", plain.Type)
				require.Equal(t, "order_event", plain.Intent)
				require.JSONEq(t, `{"orderId":"p-1","amount":3}`, string(plain.Data))
				require.Equal(t, ids[1], env.ID)
				require.Equal(t, "order.paid", env.Type)
				require.JSONEq(t, `{"orderId":"e-1"}`, string(env.Data))
				for _, m := range msgs {
					require.Equal(t, ordersSubject, m.Subject, "the route's subject wins")
					require.Equal(t, bridgePrin, m.Source, "the broker names the bridge, never the payload")
				}
			})
		}
	}
}

// Messages a gate refuses on the demo catalog's payments subject (a
// forbidden field, a schema violation, a missing idempotency key), and text
// that readers could decode differently, never reach the payments
// subscriber: each is terminated on JetStream and counted by its code, and
// the valid one after them arrives.
func TestInRefusals(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			v := newEnv(t)
			st := v.stream(t, "LEGACY", "legacy.>")
			terms, err := v.tc.SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.LEGACY.payments-in")
			require.NoError(t, err)
			require.NoError(t, v.tc.Flush())
			got := subscribe(t, v.e, "gateway-token", "payments.authorize")
			rb := start(t, Options{Dialer: tr.dialer(t, v.e), Credential: "checkout-token", NATS: v.nc, Routes: []Route{
				{Name: "payments-in", Direction: In, Subject: "payments.authorize", NATSSubject: "legacy.payments", JetStream: true, Stream: "LEGACY",
					Template: Template{Type: "payment.authorization.requested", Intent: "authorize_payment", Classification: "pci"}},
			}})

			payment := func(id string, data string) string {
				m := demo.Payment(id)
				if data != "" {
					m.Data = json.RawMessage(data)
				}
				return string(m.AppendJSON(nil))
			}
			refusals := []struct {
				payload string
				code    pigeon.Code
			}{
				{payment("pan", `{"merchantId":"m-1","orderId":"o","amount":1,"currency":"GBP","paymentToken":"tok_1","card":{"pan":"4111111111111111"}}`), pigeon.CodeSensitiveFieldDenied},
				{payment("schema", `{"merchantId":"m-1","orderId":"o","amount":"ten","currency":"GBP","paymentToken":"tok_1"}`), pigeon.CodeSchemaInvalid},
				{`{"merchantId":"m-1","orderId":"o","amount":1,"currency":"GBP","paymentToken":"tok_1"}`, pigeon.CodeIdempotencyRequired},
				{`{"merchantId":"m-1","merchantId":"m-2"}`, pigeon.CodeDuplicateKey},
				{"{\"merchantId\":\"m-\xff\"}", pigeon.CodeInvalidUTF8},
			}
			for _, r := range refusals {
				_, err := v.js.Publish(t.Context(), "legacy.payments", []byte(r.payload))
				require.NoError(t, err)
			}
			_, err = v.js.Publish(t.Context(), "legacy.payments", []byte(payment("ok-1", "")))
			require.NoError(t, err)

			require.Eventually(t, func() bool { return len(got.all()) == 1 }, 30*time.Second, 5*time.Millisecond)
			require.Equal(t, v.jsID(t, "LEGACY", "payments-in", 6), got.all()[0].ID)
			for range refusals {
				_, err := terms.NextMsg(30 * time.Second)
				require.NoError(t, err, "each refused message is terminated")
			}
			require.Eventually(t, func() bool { return routeStats(rb.b, "payments-in").Forwarded == 1 }, 30*time.Second, 5*time.Millisecond)
			s := routeStats(rb.b, "payments-in")
			want := map[pigeon.Code]uint64{}
			for _, r := range refusals {
				want[r.code]++
			}
			require.Equal(t, want, s.Refused)
			require.Zero(t, s.Retried)
			require.Eventually(t, func() bool {
				c, err := st.Consumer(t.Context(), "payments-in")
				require.NoError(t, err)
				info, err := c.Info(t.Context())
				require.NoError(t, err)
				return info.NumAckPending == 0 && info.NumPending == 0 && info.NumRedelivered == 0
			}, 30*time.Second, 5*time.Millisecond, "nothing is left to redeliver")
			time.Sleep(50 * time.Millisecond)
			require.Len(t, got.all(), 1, "no refused message reached the subscriber")
		})
	}
}

// Across a restart of the bridge, JetStream redelivers what the broker
// accepted but the first bridge never acknowledged: the broker recognises
// each by its id (MESSAGE_ID_TAKEN for a redelivery), the second bridge
// acknowledges it, and the subscriber sees every message once.
func TestInExactlyOnceAcrossRestart(t *testing.T) {
	v := newEnv(t)
	st := v.stream(t, "LEGACY", "legacy.>")
	_, err := st.CreateConsumer(t.Context(), jetstream.ConsumerConfig{Durable: "orders-in", FilterSubject: "legacy.orders",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 300 * time.Millisecond})
	require.NoError(t, err)
	got := subscribe(t, v.e, monitorToken, ordersSubject)
	opts := Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "orders-in", Direction: In, Subject: ordersSubject, NATSSubject: "legacy.orders", JetStream: true, Stream: "LEGACY", Template: ordersTemplate},
	}}
	const n = 10
	for i := range n {
		_, err := v.js.Publish(t.Context(), "legacy.orders", []byte(`{"n":`+strconv.Itoa(i)+`}`))
		require.NoError(t, err)
	}

	// The first bridge crashes after the broker accepted each message and
	// before it acknowledged it.
	first, err := New(opts)
	require.NoError(t, err)
	first.skipAck = func(string, string) bool { return true }
	rb := startBridge(t, first)
	require.Eventually(t, func() bool { return len(got.all()) == n }, 30*time.Second, 5*time.Millisecond)
	rb.stop(t)
	require.Equal(t, uint64(n), routeStats(first, "orders-in").Forwarded)

	second := start(t, opts)
	require.Eventually(t, func() bool { return routeStats(second.b, "orders-in").Duplicates == n }, 30*time.Second, 5*time.Millisecond)
	require.Zero(t, routeStats(second.b, "orders-in").Forwarded)
	require.Empty(t, routeStats(second.b, "orders-in").Refused)
	require.Eventually(t, func() bool {
		c, err := st.Consumer(t.Context(), "orders-in")
		require.NoError(t, err)
		info, err := c.Info(t.Context())
		require.NoError(t, err)
		return info.NumAckPending == 0 && info.NumPending == 0
	}, 30*time.Second, 5*time.Millisecond, "every message is acknowledged")
	msgs := got.all()
	require.Len(t, msgs, n, "the subscriber saw each message once")
	seen := map[string]bool{}
	for _, m := range msgs {
		require.False(t, seen[m.ID], "%s twice", m.ID)
		seen[m.ID] = true
	}
}

// A JetStream In route's pull loop ends with its session: cancelled while
// a pull waits on the server, Run returns once that pull expires (each
// ends by itself, within fetchWait); cancelled while the loop backs off
// after failed pulls (here its consumer was deleted), at once, not after
// the backoff (up to 5 s). Either way no goroutine of the loop or of its
// pulls is left, nor a subscription of theirs on the caller's connection.
func TestInJetStreamPullEndsWithContext(t *testing.T) {
	for _, tt := range []struct {
		name    string
		failing bool // the consumer deleted: every pull fails
		bound   time.Duration
	}{
		{"mid-pull", false, fetchWait + 20*time.Second},
		{"backing off", true, 20 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.failing {
				// Backoffs of a minute at least (a random point in the upper
				// half of the doubled delay): a return within the bound is
				// the cancel's, not the backoff's end, on however slow a
				// machine.
				wasMin, wasMax := minReconnectDelay, maxPullBackoff
				minReconnectDelay, maxPullBackoff = 2*time.Minute, 4*time.Minute
				t.Cleanup(func() { minReconnectDelay, maxPullBackoff = wasMin, wasMax })
			}
			v := newEnv(t)
			st := v.stream(t, "LEGACY", "legacy.>")
			// The JetStream API's replies come on one subscription the
			// connection keeps: make it now, to count without it.
			_, err := v.nc.Request("natsbridge.nobody", nil, time.Second)
			require.ErrorIs(t, err, nats.ErrNoResponders)
			subs := v.nc.NumSubscriptions()
			pulls := &recordCounter{msg: "natsbridge: pulling from JetStream", seen: make(chan struct{}, 100)}
			b, err := New(Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Logger: slog.New(pulls), Routes: []Route{
				{Name: "orders-in", Direction: In, Subject: ordersSubject, NATSSubject: "legacy.orders", JetStream: true, Stream: "LEGACY", Template: ordersTemplate},
			}})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- b.Run(ctx) }()
			require.Eventually(t, func() bool { return b.Stats().Connected }, 30*time.Second, 5*time.Millisecond)
			cons, err := st.Consumer(t.Context(), "orders-in")
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				info, err := cons.Info(t.Context())
				require.NoError(t, err)
				return info.NumWaiting > 0
			}, 30*time.Second, 5*time.Millisecond, "a pull waits on the server")

			if tt.failing {
				// Every pull now fails at once; the loop backs off after
				// each failure (jittered, doubling up to 5 s; here a
				// minute at least from the first).
				require.NoError(t, st.DeleteConsumer(t.Context(), "orders-in"))
				for range 1 {
					select {
					case <-pulls.seen:
					case <-time.After(10 * time.Second):
						t.Fatal("the pulls did not fail")
					}
				}
			}
			began := time.Now()
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
				require.Less(t, time.Since(began), tt.bound)
			case <-time.After(tt.bound):
				t.Fatalf("Run did not return within %v of the cancel", tt.bound)
			}
			if !assert.Eventually(t, func() bool {
				return !goroutinesIn("(*inRoute).startJetStream", "(*pullConsumer).fetch") && v.nc.NumSubscriptions() == subs
			}, 30*time.Second, 5*time.Millisecond) {
				t.Fatalf("the loop or its pulls left goroutines or subscriptions (%d, want %d):\n%s", v.nc.NumSubscriptions(), subs, goroutineStacks())
			}
		})
	}
}

// recordCounter is a slog.Handler that signals each record with message
// msg, at any level.
type recordCounter struct {
	msg  string
	seen chan struct{}
}

func (h *recordCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordCounter) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordCounter) WithGroup(string) slog.Handler            { return h }
func (h *recordCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.seen <- struct{}{}:
		default:
		}
	}
	return nil
}

// goroutinesIn reports whether a goroutine runs a function whose name
// holds one of names.
func goroutinesIn(names ...string) bool {
	stacks := goroutineStacks()
	for _, n := range names {
		if strings.Contains(stacks, n) {
			return true
		}
	}
	return false
}

func goroutineStacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}
