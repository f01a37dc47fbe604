package natsbridge

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/internal/leakcheck"
	"pigeon/policy"
	"pigeon/transport/inproc"
	"pigeon/transport/ws"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// Principals and credentials of the test catalog.
const (
	bridgeToken   = "bridge-token"
	bridgePrin    = "spiffe://test/ns/bridge/sa/nats-bridge"
	appToken      = "app-token"
	appPrin       = "spiffe://test/ns/orders/sa/orders-app"
	monitorToken  = "monitor-token"
	monitorPrin   = "spiffe://test/ns/ops/sa/monitor"
	ordersSubject = "orders.events"
	copySubject   = "orders.copy" // ordersPolicy's twin
)

// ordersPolicy is a pubsub subject the bridge may publish and receive,
// retried quickly and often, with a forbidden field.
const ordersPolicy = `{
  "name": "orders.events", "version": "v1", "mode": "pubsub", "intents": ["order_event"],
  "delivery": { "retry": { "maxAttempts": 1000, "backoff": "fixed", "maxDelayMs": 1000 } },
  "data": { "classification": "internal", "forbiddenFields": ["secret"] },
  "policy": {
    "publish": [ { "effect": "allow", "principals": ["` + bridgePrin + `", "` + appPrin + `"], "intents": ["order_event"] } ],
    "receive": [ { "effect": "allow", "principals": ["` + bridgePrin + `", "` + monitorPrin + `"] } ],
    "ack": [ { "effect": "allow", "principals": ["` + bridgePrin + `", "` + monitorPrin + `"] } ]
  }
}`

// newEngine starts a broker on the demo catalog plus orders.events, with
// redeliveries 50 times faster than by default; each of more adds to the
// catalog.
func newEngine(t testing.TB, more ...func(testing.TB, *pigeon.Catalog)) *pigeon.Engine {
	t.Helper()
	cat := demo.Catalog()
	for _, f := range more {
		f(t, cat)
	}
	sp, err := policy.ParseSubject("orders.events.json", []byte(ordersPolicy))
	require.NoError(t, err)
	cat.Subjects = append(cat.Subjects, sp)
	sp, err = policy.ParseSubject("orders.copy.json", []byte(strings.Replace(ordersPolicy, `"name": "orders.events"`, `"name": "`+copySubject+`"`, 1)))
	require.NoError(t, err)
	cat.Subjects = append(cat.Subjects, sp)
	tokens := append(demo.Tokens(),
		pigeon.StaticToken{Token: bridgeToken, Principal: bridgePrin},
		pigeon.StaticToken{Token: appToken, Principal: appPrin},
		pigeon.StaticToken{Token: monitorToken, Principal: monitorPrin})
	e, err := pigeon.New(t.Context(), &pigeon.Options{Authenticator: pigeon.NewStaticTokens(tokens...), Catalog: cat, Region: "uk",
		RetryBase: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	return e
}

// wsFront serves an engine over WebSocket; cut ends every connection (as
// a lost network would) and serves new ones on a fresh endpoint.
type wsFront struct {
	e   *pigeon.Engine
	hs  *httptest.Server
	mu  sync.Mutex
	srv *ws.Server
}

func newWSFront(t testing.TB, e *pigeon.Engine) *wsFront {
	f := &wsFront{e: e, srv: ws.NewServer(e, nil)}
	f.hs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		srv := f.srv
		f.mu.Unlock()
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		f.mu.Lock()
		srv := f.srv
		f.mu.Unlock()
		_ = srv.Shutdown(context.Background())
		f.hs.Close()
	})
	return f
}

func (f *wsFront) cut(t testing.TB) {
	f.mu.Lock()
	old := f.srv
	f.srv = ws.NewServer(f.e, nil)
	f.mu.Unlock()
	require.NoError(t, old.Shutdown(t.Context()))
}

// transports are the two dialers every end-to-end test runs on.
var transports = []struct {
	name   string
	dialer func(t testing.TB, e *pigeon.Engine) pigeon.Dialer
}{
	{"inproc", func(_ testing.TB, e *pigeon.Engine) pigeon.Dialer { return inproc.Dialer{Engine: e} }},
	{"ws", func(t testing.TB, e *pigeon.Engine) pigeon.Dialer { return ws.Dialer{URL: newWSFront(t, e).hs.URL} }},
}

// runNATS starts an embedded nats-server with JetStream in a temporary
// directory, on port (-1: a free one).
func runNATS(t testing.TB, port int, dir string) *server.Server {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	require.NoError(t, err)
	s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "nats-server did not start")
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// connectNATS dials url, reconnecting forever every wait.
func connectNATS(t testing.TB, url string, wait time.Duration) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(wait), nats.ReconnectJitter(0, 0))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// env is one test's broker, NATS server and NATS connections: the bridge's
// (nc) and the test's own (tc, js).
type env struct {
	e  *pigeon.Engine
	ns *server.Server
	nc *nats.Conn
	tc *nats.Conn
	js jetstream.JetStream
}

func newEnv(t testing.TB) *env {
	ns := runNATS(t, -1, "")
	tc := connectNATS(t, ns.ClientURL(), 20*time.Millisecond)
	js, err := jetstream.New(tc)
	require.NoError(t, err)
	return &env{e: newEngine(t), ns: ns, nc: connectNATS(t, ns.ClientURL(), 20*time.Millisecond), tc: tc, js: js}
}

// stream creates a stream on subjects.
func (v *env) stream(t testing.TB, name string, subjects ...string) jetstream.Stream {
	st, err := v.js.CreateStream(t.Context(), jetstream.StreamConfig{Name: name, Subjects: subjects})
	require.NoError(t, err)
	return st
}

// jsID is the id a JetStream In route of durable consumer durable gives
// the message at seq in the stream name as it is now.
func (v *env) jsID(t testing.TB, name, durable string, seq uint64) string {
	st, err := v.js.Stream(t.Context(), name)
	require.NoError(t, err)
	return jetStreamID(name, durable, st.CachedInfo().Created, seq)
}

// running is a bridge whose Run goroutine a test waits for.
type running struct {
	b    *Bridge
	done chan error
}

// start runs a bridge on opts, shut down when t ends.
func start(t testing.TB, opts Options) *running {
	t.Helper()
	b, err := New(opts)
	require.NoError(t, err)
	return startBridge(t, b)
}

// ackPending is how many messages the consumer name of st has handed out
// and not yet had acknowledged (-1 while the consumer does not exist).
func ackPending(t testing.TB, st jetstream.Stream, name string) int {
	t.Helper()
	c, err := st.Consumer(t.Context(), name)
	if err != nil {
		return -1
	}
	info, err := c.Info(t.Context())
	require.NoError(t, err)
	return info.NumAckPending
}

// startStalled starts b with the first message its routes hand to the
// broker held back, as behind a slow broker: hook is &b.beforeCore or
// &b.beforeJetStream. It returns the running bridge, whether that first
// message is held yet, and release, which lets it go (at most once; the
// end of the test calls it too, before the bridge stops).
func startStalled(t testing.TB, b *Bridge, hook *func(string)) (rb *running, held func() bool, release func()) {
	t.Helper()
	gate := make(chan struct{})
	var first atomic.Bool
	*hook = func(string) {
		if first.CompareAndSwap(false, true) {
			<-gate // the broker is slow: the route waits on its first message
		}
	}
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	rb = startBridge(t, b)
	t.Cleanup(release) // before the bridge's own
	return rb, first.Load, release
}

func startBridge(t testing.TB, b *Bridge) *running {
	rb := &running{b: b, done: make(chan error, 1)}
	go func() { rb.done <- b.Run(context.Background()) }()
	t.Cleanup(func() { rb.stop(t) })
	require.Eventually(t, func() bool { return b.Stats().Connected }, 30*time.Second, 5*time.Millisecond, "the bridge did not connect")
	return rb
}

// stop shuts the bridge down and waits for Run.
func (rb *running) stop(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, rb.b.Shutdown(ctx))
}

// wait returns what Run returned, within d.
func (rb *running) wait(t testing.TB, d time.Duration) error {
	t.Helper()
	select {
	case err := <-rb.done:
		rb.done <- err
		return err
	case <-time.After(d):
		t.Fatal("Run did not return")
		return nil
	}
}

// route returns the stats of the route named name.
func routeStats(b *Bridge, name string) RouteStats {
	for _, r := range b.Stats().Routes {
		if r.Name == name {
			return r
		}
	}
	return RouteStats{}
}

// collector gathers the messages a Pigeon subscription receives.
type collector struct {
	mu   sync.Mutex
	msgs []*pigeon.Message
}

func (c *collector) handle(_ context.Context, d *pigeon.Delivery) error {
	c.mu.Lock()
	c.msgs = append(c.msgs, d.Message)
	c.mu.Unlock()
	return nil
}

func (c *collector) all() []*pigeon.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*pigeon.Message(nil), c.msgs...)
}

// subscribe collects subject for credential in process.
func subscribe(t testing.TB, e *pigeon.Engine, credential, subject string, opts ...pigeon.SubscribeOption) *collector {
	t.Helper()
	s, err := e.Connect(t.Context(), credential, []string{subject})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	c := &collector{}
	_, err = s.Subscribe(t.Context(), subject, c.handle, opts...)
	require.NoError(t, err)
	return c
}

// order returns an orders.events message published by the app.
func order(n string) *pigeon.Message {
	return &pigeon.Message{Type: "order.created", Subject: ordersSubject, Intent: "order_event",
		Data: []byte(`{"orderId":"` + n + `","amount":12.5}`)}
}

// publisher is the app's session on orders.events.
func publisher(t testing.TB, e *pigeon.Engine) pigeon.Session {
	s, err := e.Connect(t.Context(), appToken, []string{ordersSubject})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// code is err's pigeon code, failing when err is no *pigeon.Error.
func code(t testing.TB, err error) pigeon.Code {
	t.Helper()
	var pe *pigeon.Error
	require.True(t, errors.As(err, &pe), "%v is no *pigeon.Error", err)
	return pe.Code
}
