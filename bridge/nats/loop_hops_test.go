package natsbridge

import (
	"context"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
)

// natsTap records the hops of the envelopes published on a NATS subject.
type natsTap struct {
	mu   sync.Mutex
	hops []uint32
}

func tap(t *testing.T, nc *nats.Conn, subject string) *natsTap {
	t.Helper()
	p := &natsTap{}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		back, err := pigeon.DecodeMessage(m.Data)
		p.mu.Lock()
		defer p.mu.Unlock()
		if err != nil {
			p.hops = append(p.hops, 1<<32-1)
			return
		}
		p.hops = append(p.hops, back.Hops)
	})
	require.NoError(t, err)
	require.NoError(t, sub.SetPendingLimits(-1, -1))
	require.NoError(t, nc.Flush())
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return p
}

func (p *natsTap) seen() []uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]uint32(nil), p.hops...)
}

// A loop of two bridges on one broker: bridge A carries orders.events out
// to loop.n1 and loop.n2 back in; bridge B carries loop.n1 in to
// orders.copy, and orders.copy out to loop.n2. Neither bridge skips the
// other's messages (each skips only those of its own Out routes), and
// every pass gets a fresh id (the route's scope nests around the id the
// envelope carries), so neither the broker's ids nor the streams' dedupe
// stop it. Each pass through an In route is one hop: the pass that would
// publish deeper than MaxHops is refused HOPS_EXCEEDED, and the loop ends.
//
// Over WebSocket the bridges' principal holds pigeon.RoleBridge, as the
// standalone pigeon-bridge's must for its loops to end: the broker takes
// its publishes' depth then (without the role it writes 0, and the loop
// goes on: TestInCountsAHop).
func TestBridgeLoopEnds(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { testBridgeLoopEnds(t, tr.dialer) })
	}
}

func testBridgeLoopEnds(t *testing.T, dialer func(t testing.TB, e *pigeon.Engine) pigeon.Dialer) {
	v := newEnv(t)
	_, err := v.e.CreateAccount(t.Context(), pigeon.Account{ID: bridgePrin, Roles: []string{pigeon.RoleBridge}})
	require.NoError(t, err)
	n1, n2 := tap(t, v.tc, "loop.n1"), tap(t, v.tc, "loop.n2")
	const maxHops = 3
	a := start(t, Options{Dialer: dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, MaxHops: maxHops, Routes: []Route{
		{Name: "a-out", Direction: Out, Subject: ordersSubject, NATSSubject: "loop.n1"},
		{Name: "a-in", Direction: In, Subject: ordersSubject, NATSSubject: "loop.n2", Payload: PayloadEnvelope},
	}})
	b := start(t, Options{Dialer: dialer(t, v.e), Credential: bridgeToken, NATS: connectNATS(t, v.ns.ClientURL(), 20*time.Millisecond),
		MaxHops: maxHops, Routes: []Route{
			{Name: "b-in", Direction: In, Subject: copySubject, NATSSubject: "loop.n1", Payload: PayloadEnvelope},
			{Name: "b-out", Direction: Out, Subject: copySubject, NATSSubject: "loop.n2"},
		}})
	_, err = publisher(t, v.e).Publish(t.Context(), order("o-1"))
	require.NoError(t, err)

	// The loop ends with one refusal, or goes on: 100 passes say it does.
	const endless = 100
	require.Eventually(t, func() bool {
		return routeStats(a.b, "a-in").Refused[CodeHopsExceeded] == 1 || len(n1.seen()) >= endless
	}, 60*time.Second, 5*time.Millisecond, "the loop neither ended nor went on")
	require.Less(t, len(n1.seen()), endless, "the loop went on: %d passes through loop.n1", len(n1.seen()))

	// The seed at 0 goes out, comes in to orders.copy at 1, out, in to
	// orders.events at 2, out, in at 3, out; at 4 it is refused.
	require.Eventually(t, func() bool { return len(n1.seen()) == 2 && len(n2.seen()) == 2 }, 30*time.Second, 5*time.Millisecond,
		"loop.n1 %v, loop.n2 %v", n1.seen(), n2.seen())
	require.Equal(t, []uint32{0, 2}, n1.seen())
	require.Equal(t, []uint32{1, 3}, n2.seen())
	// b-in counts its second pass once the broker has answered its
	// publish, which can come after the pass went round to a-in's refusal.
	require.Eventually(t, func() bool { return routeStats(b.b, "b-in").Forwarded == 2 }, 30*time.Second, 5*time.Millisecond,
		"b-in forwarded %d", routeStats(b.b, "b-in").Forwarded)
	require.EqualValues(t, 1, routeStats(a.b, "a-in").Forwarded)
	require.Empty(t, routeStats(b.b, "b-in").Refused)
}

// An In route counts its pass as one hop: a message whose envelope
// carried h is published at h+1 (in process, and over WebSocket when the
// bridge's principal holds pigeon.RoleBridge), data at 1, and one that
// carried MaxHops or more is refused HOPS_EXCEEDED before the broker, and
// on JetStream terminated, never redelivered. Over WebSocket without the
// role the broker refuses the depth FORBIDDEN: the bridge then publishes
// at 0, as any client, logs it once, and goes on (it does not stop, as
// for another FORBIDDEN).
func TestInCountsAHop(t *testing.T) {
	for _, tr := range transports {
		for _, role := range []bool{false, true} {
			for _, jsMode := range []bool{false, true} {
				if tr.name == "inproc" && !role {
					continue // an embedder's session needs no role
				}
				t.Run(tr.name+"/role="+strconv.FormatBool(role)+"/jetstream="+strconv.FormatBool(jsMode), func(t *testing.T) {
					testInCountsAHop(t, tr.dialer, role, jsMode)
				})
			}
		}
	}
}

func testInCountsAHop(t *testing.T, dialer func(t testing.TB, e *pigeon.Engine) pigeon.Dialer, role, jsMode bool) {
	v := newEnv(t)
	if role {
		_, err := v.e.CreateAccount(t.Context(), pigeon.Account{ID: bridgePrin, Roles: []string{pigeon.RoleBridge}})
		require.NoError(t, err)
	}
	warned := &recordCounter{msg: warnNoDepth, seen: make(chan struct{}, 2)}
	route := Route{Name: "orders-in", Direction: In, Subject: ordersSubject, NATSSubject: "legacy.orders", Template: ordersTemplate}
	var st jetstream.Stream
	if jsMode {
		st = v.stream(t, "LEGACY", "legacy.>")
		route.JetStream, route.Stream = true, "LEGACY"
	}
	got := subscribe(t, v.e, monitorToken, ordersSubject)
	rb := start(t, Options{Dialer: dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Logger: slog.New(warned), Routes: []Route{route}})
	env := func(id string, hops uint64) string {
		return `{"specversion":"1.0","id":"` + id + `","type":"order.paid","intent":"order_event","hops":` +
			strconv.FormatUint(hops, 10) + `,"data":{"orderId":"` + id + `"}}`
	}
	payloads := []string{
		env("deep", DefaultMaxHops-1), // published at MaxHops
		env("over", DefaultMaxHops),   // refused
		env("absurd", 1<<32-1),        // refused
		`{"orderId":"plain"}`,         // data: at 1
		env("none", 0),                // at 1
	}
	for _, p := range payloads {
		if jsMode {
			_, err := v.js.Publish(t.Context(), "legacy.orders", []byte(p))
			require.NoError(t, err)
		} else {
			require.NoError(t, v.tc.Publish("legacy.orders", []byte(p)))
		}
	}
	var s RouteStats
	require.Eventually(t, func() bool {
		s = routeStats(rb.b, "orders-in")
		return s.Forwarded == 3 && s.Refused[CodeHopsExceeded] == 2
	}, 30*time.Second, 5*time.Millisecond, "the route's counts: %+v", &s)
	require.Eventually(t, func() bool { return len(got.all()) == 3 }, 30*time.Second, 5*time.Millisecond)
	want := []uint32{DefaultMaxHops, 1, 1}
	if !role {
		want = []uint32{0, 0, 0} // a client's message is at depth 0
	}
	var hops []uint32
	for _, m := range got.all() {
		hops = append(hops, m.Hops)
	}
	require.Equal(t, want, hops)
	if jsMode {
		// Terminated: nothing waits for a redelivery.
		require.Eventually(t, func() bool { return ackPending(t, st, "orders-in") == 0 }, 30*time.Second, 5*time.Millisecond)
	}
	s = routeStats(rb.b, "orders-in")
	require.EqualValues(t, map[pigeon.Code]uint64{CodeHopsExceeded: 2}, s.Refused)
	require.Zero(t, s.Retried)
	require.Equal(t, !role, len(warned.seen) == 1, "warned once without the role")
}

func TestDepth(t *testing.T) {
	for _, tt := range []struct {
		max     int
		carried uint32
		want    uint32
		refused bool
	}{
		{max: DefaultMaxHops, carried: 0, want: 1},
		{max: DefaultMaxHops, carried: DefaultMaxHops - 1, want: DefaultMaxHops},
		{max: DefaultMaxHops, carried: DefaultMaxHops, refused: true},
		{max: DefaultMaxHops, carried: 1<<32 - 1, refused: true},
		{max: 1, carried: 0, want: 1},
		{max: 1, carried: 1, refused: true},
		{max: math.MaxInt, carried: 1<<32 - 2, want: 1<<32 - 1},
		{max: math.MaxInt, carried: 1<<32 - 1, refused: true}, // never wraps to 0
		{max: -1, carried: 5, want: 0},                        // no bound: no depth carried
		{max: -1, carried: 1<<32 - 1, want: 0},
	} {
		in := &inRoute{b: &Bridge{opts: Options{MaxHops: tt.max}}}
		got, err := in.depth(tt.carried)
		if tt.refused {
			require.Equal(t, CodeHopsExceeded, code(t, err), "max %d, carried %d", tt.max, tt.carried)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tt.want, got, "max %d, carried %d", tt.max, tt.carried)
	}
	o := (&Options{}).withDefaults()
	require.Equal(t, DefaultMaxHops, o.MaxHops)
	require.Equal(t, programs.DefaultMaxHops, DefaultMaxHops, "a pass through a bridge is bounded as a program's emit")
	o = (&Options{MaxHops: -1}).withDefaults()
	require.Equal(t, -1, o.MaxHops)
}

// A loop of a bridge pass and a program: orders.events goes out to
// loop.n1, comes back in (another bridge) to orders.copy, where a program
// emits to orders.events again. The program's emits count its depth, but
// each pass through the bridge started again at 0, so the program never
// reached its bound. Now the pass counts too, and the program's bound
// ends the loop. The program is a stand-in that publishes as package
// programs does: as its caller at one more than the handled message's
// Hops, and nothing deeper than its MaxHops.
func TestBridgeAndProgramLoopEnds(t *testing.T) {
	v := newEnv(t)
	n1 := tap(t, v.tc, "loop.n1")
	const maxHops = 3
	start(t, Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, MaxHops: maxHops, Routes: []Route{
		{Name: "a-out", Direction: Out, Subject: ordersSubject, NATSSubject: "loop.n1"},
	}})
	b := start(t, Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: connectNATS(t, v.ns.ClientURL(), 20*time.Millisecond),
		MaxHops: maxHops, Routes: []Route{
			{Name: "b-in", Direction: In, Subject: copySubject, NATSSubject: "loop.n1", Payload: PayloadEnvelope},
		}})
	prog, err := v.e.Connect(t.Context(), bridgeToken, []string{copySubject, ordersSubject})
	require.NoError(t, err)
	t.Cleanup(func() { _ = prog.Close(context.Background()) })
	var emitted, refused atomic.Int64
	_, err = prog.Subscribe(t.Context(), copySubject, func(ctx context.Context, d *pigeon.Delivery) error {
		if d.Message.Hops+1 > maxHops {
			refused.Add(1)
			return nil
		}
		c := prog.(interface{ Caller() pigeon.Caller }).Caller()
		c.Hops = d.Message.Hops + 1
		_, err := v.e.Publish(ctx, c, order("again"))
		if err == nil {
			emitted.Add(1)
		}
		return err
	})
	require.NoError(t, err)
	_, err = publisher(t, v.e).Publish(t.Context(), order("o-1"))
	require.NoError(t, err)

	const endless = 100
	require.Eventually(t, func() bool { return refused.Load() == 1 || emitted.Load() >= endless }, 60*time.Second, 5*time.Millisecond,
		"the loop neither ended nor went on")
	require.Less(t, emitted.Load(), int64(endless), "the loop went on: %d emits", emitted.Load())
	require.EqualValues(t, 1, emitted.Load())
	require.Eventually(t, func() bool { return len(n1.seen()) == 2 }, 30*time.Second, 5*time.Millisecond, "loop.n1 %v", n1.seen())
	require.Equal(t, []uint32{0, 2}, n1.seen())
	require.Eventually(t, func() bool { return routeStats(b.b, "b-in").Forwarded == 2 }, 30*time.Second, 5*time.Millisecond,
		"b-in forwarded %d", routeStats(b.b, "b-in").Forwarded)
}
