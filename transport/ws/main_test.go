package ws_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/leakcheck"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
	"pigeon/transport/ws"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// env is an engine on the conformance catalog behind a WebSocket server
// listening on 127.0.0.1.
type env struct {
	e   *pigeon.Engine
	st  store.Store // the engine's store, which the test owns
	srv *ws.Server
	hs  *httptest.Server
	kl  *killListener
	url string // ws://127.0.0.1:port/v1/ws
}

// manyContracts lifts the per-principal negotiation and subscription
// limits, for tests that open hundreds of connections as one principal.
func manyContracts(o *pigeon.Options) {
	o.NegotiateRate.PerSecond = -1
	o.MaxContractsPerPrincipal = -1
	o.MaxSubscriptionsPerPrincipal = -1
}

// longAckWait sets jobs.run's ack wait (300 ms in the suite's catalog) to
// an hour, for tests that answer deliveries by hand and say exactly what
// comes next: under -race on a busy machine 300 ms easily pass between a
// delivery and its answer, and the lease that runs out meanwhile sends
// the job again (or frees a full window) behind the test's back.
func longAckWait(o *pigeon.Options) {
	for i := range o.Catalog.Subjects {
		if p := &o.Catalog.Subjects[i]; p.Name == "jobs.run" {
			p.Delivery.AckWaitMs = time.Hour.Milliseconds()
		}
	}
}

func newEnv(t testing.TB, wsOpts *ws.Options, mutate ...func(*pigeon.Options)) *env {
	t.Helper()
	opts := transporttest.Options()
	for _, fn := range mutate {
		fn(opts)
	}
	if opts.Store == nil {
		opts.Store = memory.New(nil)
	}
	st := opts.Store
	e, err := pigeon.New(context.Background(), opts)
	require.NoError(t, err)
	srv := ws.NewServer(e, wsOpts)
	mux := http.NewServeMux()
	mux.Handle("/v1/ws", srv)
	hs := httptest.NewUnstartedServer(mux)
	kl := &killListener{Listener: hs.Listener}
	hs.Listener = kl
	hs.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, srv.Shutdown(ctx))
		hs.Close()
		require.NoError(t, e.Shutdown(ctx))
		require.NoError(t, st.Close(ctx))
	})
	return &env{e: e, st: st, srv: srv, hs: hs, kl: kl, url: "ws" + strings.TrimPrefix(hs.URL, "http") + "/v1/ws"}
}

// killListener remembers the connections it accepted, so that a test can
// cut them all as a network failure would.
type killListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *killListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

// kill cuts every connection accepted so far.
func (l *killListener) kill() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.conns = nil
}

// dial connects a Go client session and closes it with the test.
func (v *env) dial(t testing.TB, token string, subjects []string, opts ...ws.Option) *ws.Session {
	t.Helper()
	s, err := ws.Dial(context.Background(), v.url, token, subjects, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t testing.TB, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: "+msg, args...)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestConformance runs the session conformance suite on the WebSocket
// session, end to end over 127.0.0.1.
func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) transporttest.Harness {
		v := newEnv(t, nil)
		return transporttest.Harness{Engine: v.e, Connect: ws.Dialer{URL: v.url}.Dial,
			ConnectWith: func(ctx context.Context, token string, subjects []string, opts ...pigeon.ConnectOption) (pigeon.Session, error) {
				return ws.Dial(ctx, v.url, token, subjects, ws.WithConnectOptions(opts...))
			},
			Trim: transporttest.Trimmer(v.st)}
	})
}
