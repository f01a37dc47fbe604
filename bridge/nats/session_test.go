package natsbridge

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/inproc"
	"pigeon/transport/ws"
)

// Revoking the bridge's contract stops the Out route before the next
// delivery; Run returns CONTRACT_REVOKED and does not negotiate again.
func TestRevocationStopsTheBridge(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			v := newEnv(t)
			sub, err := v.tc.SubscribeSync("bridge.orders")
			require.NoError(t, err)
			require.NoError(t, v.tc.Flush())
			rb := start(t, Options{Dialer: tr.dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
				{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "bridge.orders"},
			}})
			pub := publisher(t, v.e)
			_, err = pub.Publish(t.Context(), order("before"))
			require.NoError(t, err)
			_, err = sub.NextMsg(30 * time.Second)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return routeStats(rb.b, "orders-out").Forwarded == 1 }, 30*time.Second, 5*time.Millisecond)

			p, err := v.e.Authenticate(t.Context(), bridgeToken)
			require.NoError(t, err)
			require.NoError(t, v.e.RevokeContract(t.Context(), p, rb.b.Stats().ContractID))
			_, err = pub.Publish(t.Context(), order("after"))
			require.NoError(t, err)

			err = rb.wait(t, 10*time.Second)
			require.Equal(t, pigeon.CodeContractRevoked, code(t, err))
			require.ErrorIs(t, err, pigeon.ErrContract)
			s := rb.b.Stats()
			require.Equal(t, pigeon.CodeContractRevoked, pigeon.ErrorCode(s.Err))
			require.Equal(t, pigeon.CodeContractRevoked, pigeon.ErrorCode(s.Routes[0].Err), "the route says why it stopped")
			require.False(t, s.Connected)
			require.Equal(t, uint64(1), s.Sessions, "a revoked contract is not negotiated again")
			m, err := sub.NextMsg(300 * time.Millisecond)
			require.ErrorIs(t, err, nats.ErrTimeout, "the message published after the revocation never left: %v", m)
			require.Equal(t, uint64(1), s.Routes[0].Forwarded)
		})
	}
}

// An In route skips what this bridge's Out routes published: a message
// carried out to NATS does not come back in, and a NATS message carried in
// and out again is not carried in a second time.
func TestLoopPrevention(t *testing.T) {
	v := newEnv(t)
	v.stream(t, "LOOP", "loop.orders")
	sub, err := v.tc.SubscribeSync("loop.orders")
	require.NoError(t, err)
	require.NoError(t, v.tc.Flush())
	got := subscribe(t, v.e, monitorToken, ordersSubject)
	rb := start(t, Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "loop-out", Direction: Out, Subject: ordersSubject, NATSSubject: "loop.orders"},
		{Name: "loop-in", Direction: In, Subject: ordersSubject, NATSSubject: "loop.orders", JetStream: true, Stream: "LOOP", Template: ordersTemplate},
	}})
	_, err = publisher(t, v.e).Publish(t.Context(), order("from-pigeon"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return routeStats(rb.b, "loop-in").Skipped == 1 }, 30*time.Second, 5*time.Millisecond)

	_, err = v.js.Publish(t.Context(), "loop.orders", []byte(`{"orderId":"from-nats"}`))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return routeStats(rb.b, "loop-in").Skipped == 2 }, 30*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	msgs := got.all()
	require.Len(t, msgs, 2, "each message entered Pigeon once")
	require.Equal(t, appPrin, msgs[0].Source)
	require.Equal(t, bridgePrin, msgs[1].Source)
	s := routeStats(rb.b, "loop-in")
	require.Equal(t, uint64(1), s.Forwarded)
	require.Zero(t, s.Duplicates)
	for range 3 { // from Pigeon, from NATS, and its echo
		_, err := sub.NextMsg(30 * time.Second)
		require.NoError(t, err)
	}
	_, err = sub.NextMsg(100 * time.Millisecond)
	require.ErrorIs(t, err, nats.ErrTimeout)
}

// When the WebSocket connection to the broker is lost, the bridge dials
// again and resumes both directions: every message published in Pigeon
// lands in the Out stream once, and every message of the In stream reaches
// Pigeon's subscriber once.
func TestReconnectOverWebSocket(t *testing.T) {
	v := newEnv(t)
	out := v.stream(t, "OUT", "out.orders")
	v.stream(t, "IN", "in.orders")
	got := subscribe(t, v.e, monitorToken, ordersSubject)
	front := newWSFront(t, v.e)
	rb := start(t, Options{Dialer: wsDialer(front), Credential: bridgeToken, NATS: v.nc, PublishTimeout: 2 * time.Second, Routes: []Route{
		{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "out.orders", JetStream: true, Stream: "OUT"},
		{Name: "orders-in", Direction: In, Subject: ordersSubject, NATSSubject: "in.orders", JetStream: true, Stream: "IN", Template: ordersTemplate},
	}})
	pub := publisher(t, v.e)
	const n = 60
	for i := range n {
		_, err := pub.Publish(t.Context(), order("p-"+strconv.Itoa(i)))
		require.NoError(t, err)
		_, err = v.js.Publish(t.Context(), "in.orders", []byte(`{"n":`+strconv.Itoa(i)+`}`))
		require.NoError(t, err)
		if i == 0 {
			require.Eventually(t, func() bool { return routeStats(rb.b, "orders-out").Forwarded > 0 }, 30*time.Second, 5*time.Millisecond)
		}
		if i == n/3 || i == 2*n/3 {
			sessions := rb.b.Stats().Sessions
			front.cut(t)
			require.Eventually(t, func() bool { return rb.b.Stats().Sessions > sessions && rb.b.Stats().Connected }, 30*time.Second, 5*time.Millisecond)
		}
	}
	require.Eventually(t, func() bool { return len(got.all()) == 2*n }, 30*time.Second, 10*time.Millisecond)
	if !assert.Eventually(t, func() bool {
		info, err := out.Info(t.Context())
		require.NoError(t, err)
		return info.State.Msgs == 2*n
	}, 30*time.Second, 10*time.Millisecond, "every message left once") {
		t.Fatalf("%s", outDiagnosis(t, out, got.all(), rb.b))
	}
	time.Sleep(200 * time.Millisecond)
	ids := map[string]bool{}
	for _, m := range got.all() {
		require.False(t, ids[m.ID], "%s reached Pigeon twice", m.ID)
		ids[m.ID] = true
	}
	require.Len(t, ids, 2*n)
	info, err := out.Info(t.Context())
	require.NoError(t, err)
	require.Equal(t, uint64(2*n), info.State.Msgs)
	for seq := uint64(1); seq <= 2*n; seq++ {
		m, err := out.GetMsg(t.Context(), seq)
		require.NoError(t, err)
		require.True(t, ids[m.Header.Get("Nats-Msg-Id")])
	}
	require.GreaterOrEqual(t, rb.b.Stats().Sessions, uint64(3), "a session per cut")
}

// An Out route alone notices a lost WebSocket connection (it publishes
// nothing that would fail) and resumes where it left off.
func TestReconnectOutOnly(t *testing.T) {
	v := newEnv(t)
	out := v.stream(t, "OUT", "out.orders")
	front := newWSFront(t, v.e)
	rb := start(t, Options{Dialer: wsDialer(front), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "out.orders", JetStream: true},
	}})
	pub := publisher(t, v.e)
	_, err := pub.Publish(t.Context(), order("p-0"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return routeStats(rb.b, "orders-out").Forwarded == 1 }, 30*time.Second, 5*time.Millisecond)
	front.cut(t)
	for i := 1; i < 5; i++ {
		_, err := pub.Publish(t.Context(), order("p-"+strconv.Itoa(i)))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		info, err := out.Info(t.Context())
		require.NoError(t, err)
		return info.State.Msgs == 5
	}, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, uint64(2), rb.b.Stats().Sessions)
}

// A connection lost before the Out route was handed anything: the new
// session's subscription starts where the first one did, so what was
// published while the bridge was away is carried (before, it started
// after the last message again and skipped them).
func TestReconnectOutBeforeAnyDelivery(t *testing.T) {
	v := newEnv(t)
	out := v.stream(t, "OUT", "out.orders")
	front := newWSFront(t, v.e)
	rb := start(t, Options{Dialer: wsDialer(front), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "out.orders", JetStream: true},
	}})
	require.Eventually(t, func() bool { return routeStats(rb.b, "orders-out").Running }, 30*time.Second, 5*time.Millisecond)
	front.cut(t)
	pub := publisher(t, v.e)
	for i := range 4 {
		_, err := pub.Publish(t.Context(), order("p-"+strconv.Itoa(i)))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		info, err := out.Info(t.Context())
		require.NoError(t, err)
		return info.State.Msgs == 4
	}, 30*time.Second, 10*time.Millisecond)
	require.GreaterOrEqual(t, rb.b.Stats().Sessions, uint64(2))
}

func wsDialer(f *wsFront) pigeon.Dialer { return ws.Dialer{URL: f.hs.URL} }

// A contract that expires is renewed: in place by the session itself (the
// default), or, for a session dialed WithoutAutoRenew, by the bridge with
// a new session, before it expires (a lifetime of a second or more: the
// broker never refuses it as expired) or when the broker refuses it as
// expired; messages flow on in both directions, each once, over the
// renewals.
//
// The bridge renews when a tenth of the lifetime it had at the session's
// start is left, and only when that start leaves it a second or more: the
// proactive case gives it 5 s, so that neither a slow start (routes made
// on a busy machine under -race take hundreds of milliseconds) nor a slow
// hand-over to the next session (half a second of slack) can make the
// broker refuse the old contract as expired; messages are published while
// it renews, and the test waits for the renewals rather than expecting
// them by a given time.
func TestContractRenewal(t *testing.T) {
	for _, tt := range []struct {
		name      string
		ttl       time.Duration
		auto      bool // the session renews its contract in place (the default)
		proactive bool
		publish   time.Duration // messages are spread over this long
		sessions  uint64        // at least: renewals+1
	}{
		{"session renews in place", 600 * time.Millisecond, true, true, 3 * time.Second, 1},
		{"bridge renews before expiry", 5 * time.Second, false, true, 6 * time.Second, 2},
		{"bridge renews once refused", 600 * time.Millisecond, false, false, 3 * time.Second, 3},
	} {
		ttl := tt.ttl
		t.Run(tt.name, func(t *testing.T) {
			v := newEnv(t)
			out := v.stream(t, "OUT", "out.orders")
			v.stream(t, "IN", "in.orders")
			got := subscribe(t, v.e, monitorToken, ordersSubject)
			dial := []pigeon.ConnectOption{pigeon.WithContractTTL(ttl)}
			if !tt.auto {
				dial = append(dial, pigeon.WithoutAutoRenew())
			}
			rb := start(t, Options{Dialer: inproc.Dialer{Engine: v.e, Opts: dial},
				Credential: bridgeToken, NATS: v.nc, Routes: []Route{
					{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "out.orders", JetStream: true},
					{Name: "orders-in", Direction: In, Subject: ordersSubject, NATSSubject: "in.orders", JetStream: true, Stream: "IN", Template: ordersTemplate},
				}})
			pub := publisher(t, v.e)
			const n = 30
			deadline := time.Now().Add(tt.publish)
			for i := range n {
				_, err := pub.Publish(t.Context(), order("p-"+strconv.Itoa(i)))
				require.NoError(t, err)
				_, err = v.js.Publish(t.Context(), "in.orders", []byte(`{"n":`+strconv.Itoa(i)+`}`))
				require.NoError(t, err)
				time.Sleep(time.Until(deadline) / time.Duration(n-i))
			}
			require.Eventually(t, func() bool { return len(got.all()) == 2*n }, 30*time.Second, 10*time.Millisecond)
			require.Eventually(t, func() bool {
				info, err := out.Info(t.Context())
				require.NoError(t, err)
				return info.State.Msgs == 2*n
			}, 30*time.Second, 10*time.Millisecond)
			require.Eventually(t, func() bool { return rb.b.Stats().Sessions >= tt.sessions }, 30*time.Second, 10*time.Millisecond,
				"renewed: %d sessions", rb.b.Stats().Sessions)
			require.NoError(t, rb.b.Stats().Err)
			time.Sleep(100 * time.Millisecond)
			require.Len(t, got.all(), 2*n)
			recs, err := v.e.Audit(t.Context(), 0, 100000)
			require.NoError(t, err)
			expired := 0
			for _, r := range recs {
				if r.Principal == bridgePrin && r.Code == string(pigeon.CodeContractExpired) {
					expired++
				}
			}
			if tt.auto {
				require.Equal(t, uint64(1), rb.b.Stats().Sessions, "one session throughout, its contract renewed in place")
			}
			if tt.proactive {
				require.Zero(t, expired, "renewed before the broker refused anything as expired")
			} else {
				require.NotZero(t, expired, "the broker refused the expired contract, and the bridge renewed it")
			}
		})
	}
}

// Run refuses a second call and a call after Shutdown; Shutdown is
// idempotent, and the first dial's refusal is returned at once.
func TestRunLifecycle(t *testing.T) {
	v := newEnv(t)
	opts := Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "bridge.orders"},
	}}
	rb := start(t, opts)
	require.Equal(t, pigeon.CodeConflict, code(t, rb.b.Run(t.Context())))
	rb.stop(t)
	require.NoError(t, rb.wait(t, 5*time.Second), "Run returns nil after Shutdown")
	require.NoError(t, rb.b.Shutdown(t.Context()))
	require.Equal(t, pigeon.CodeShutdown, code(t, rb.b.Run(t.Context())))

	bad := opts
	bad.Credential = "wrong-token"
	b, err := New(bad)
	require.NoError(t, err)
	err = b.Run(t.Context())
	require.Equal(t, pigeon.CodeUnauthenticated, code(t, err))
	require.ErrorIs(t, err, pigeon.ErrUnauthenticated)

	// A route the contract does not grant stops the bridge at once, named:
	// an In route before any message comes, an Out route.
	for _, tt := range []struct {
		credential string
		route      Route
	}{
		{monitorToken, Route{Name: "orders-in", Direction: In, Subject: ordersSubject, NATSSubject: "x"}}, // may receive, not publish
		{appToken, Route{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "x"}},   // may publish, not receive
	} {
		notMine := opts
		notMine.Credential, notMine.Routes = tt.credential, []Route{tt.route}
		b, err = New(notMine)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		err = b.Run(ctx)
		cancel()
		require.Equal(t, pigeon.CodeOperationNotInContract, code(t, err))
		require.Contains(t, err.Error(), `route "`+tt.route.Name+`"`)
		require.Equal(t, pigeon.CodeOperationNotInContract, pigeon.ErrorCode(b.Stats().Routes[0].Err))
	}

	// A missing stream is a startup error too.
	noStream := opts
	noStream.Routes = []Route{{Name: "in", Direction: In, Subject: ordersSubject, NATSSubject: "x", JetStream: true, Stream: "MISSING"}}
	b, err = New(noStream)
	require.NoError(t, err)
	err = b.Run(t.Context())
	require.Equal(t, pigeon.CodeInvalidArgument, code(t, err))
	require.Contains(t, err.Error(), `route "in": the JetStream stream "MISSING" does not exist`)

	// With a URL the bridge dials NATS itself (and closes that connection).
	own := opts
	own.NATS, own.URL = nil, v.ns.ClientURL()
	rb = start(t, own)
	rb.stop(t)
	own.URL = "nats://127.0.0.1:1"
	b, err = New(own)
	require.NoError(t, err)
	require.ErrorContains(t, b.Run(t.Context()), "natsbridge: cannot connect to NATS at nats://127.0.0.1:1")

	// Run with a cancelled context returns nil at once.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	b, err = New(opts)
	require.NoError(t, err)
	require.NoError(t, b.Run(ctx))
}

// outDiagnosis says what an Out stream holds against the messages Pigeon
// holds: its count, the Pigeon messages missing from it (by sequence), the
// ids it holds more than once, and the bridge's counters.
func outDiagnosis(t *testing.T, out jetstream.Stream, want []*pigeon.Message, b *Bridge) string {
	info, err := out.Info(t.Context())
	require.NoError(t, err)
	held := map[string]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		if m, err := out.GetMsg(t.Context(), seq); err == nil {
			held[m.Header.Get(HeaderMsgID)]++
		}
	}
	var missing []uint64
	for _, m := range want {
		if held[m.ID] == 0 {
			missing = append(missing, m.Sequence)
		}
	}
	var twice []string
	for id, k := range held {
		if k > 1 {
			twice = append(twice, id)
		}
	}
	return fmt.Sprintf("the Out stream holds %d messages of %d: missing Pigeon sequences %v, held twice %v; bridge %+v",
		info.State.Msgs, len(want), missing, twice, b.Stats())
}
