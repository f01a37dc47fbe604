package main

import (
	"bytes"
	"context"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"pigeon"
	natsbridge "pigeon/bridge/nats"
	"pigeon/demo"
	"pigeon/policy"
	pigeonserver "pigeon/server"
)

// TestMain runs the command itself when the test binary is started as
// the command (the end-to-end test does), and the tests otherwise.
func TestMain(m *testing.M) {
	if os.Getenv("PIGEON_BRIDGE_RUN_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

const goodConfig = `
pigeon:
  url: http://127.0.0.1:8787
  credential: bridge-token
  region: uk
  contractTTL: 1h
nats:
  url: nats://127.0.0.1:4222
publishTimeout: 5s
maxHops: -1
logLevel: debug
routes:
  - name: orders-out
    direction: out
    subject: orders.events
    natsSubject: bridge.orders
    jetstream: true
    stream: ORDERS
    selector: /currency=GBP
    maxInFlight: 4
  - name: orders-in
    direction: in
    subject: orders.events
    natsSubject: legacy.orders.>
    payload: data
    template: { type: order.created, intent: order_event, classification: internal }
`

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name, yaml, err string
	}{
		{"good", goodConfig, ""},
		{"unknown top-level key", goodConfig + "colour: blue\n", "field colour not found"},
		{"unknown route key", strings.Replace(goodConfig, "    maxInFlight: 4", "    maxInflight: 4", 1), "field maxInflight not found"},
		{"unknown template key", strings.Replace(goodConfig, "{ type:", "{ kind: x, type:", 1), "field kind not found"},
		{"empty", "", "the file is empty"},
		{"no pigeon url", strings.Replace(goodConfig, "  url: http://127.0.0.1:8787\n", "", 1), "pigeon.url is required"},
		{"no credential", strings.Replace(goodConfig, "  credential: bridge-token\n", "", 1), "pigeon.credential or pigeon.credentialFile is required"},
		{"both credentials", strings.Replace(goodConfig, "  credential: bridge-token\n", "  credential: a\n  credentialFile: b\n", 1), "exclusive"},
		{"no nats url", strings.Replace(goodConfig, "  url: nats://127.0.0.1:4222\n", "", 1), "nats.url is required"},
		{"no routes", goodConfig[:strings.Index(goodConfig, "routes:")], "at least one route"},
		{"bad direction", strings.Replace(goodConfig, "direction: out", "direction: sideways", 1), `routes[0] ("orders-out"): direction`},
		{"bad payload", strings.Replace(goodConfig, "payload: data", "payload: xml", 1), `routes[1] ("orders-in"): payload`},
		{"bad duration", strings.Replace(goodConfig, "publishTimeout: 5s", "publishTimeout: soon", 1), "line 9: cannot unmarshal !!str `soon` into time.Duration"},
		{"bad log level", strings.Replace(goodConfig, "logLevel: debug", "logLevel: loud", 1), "logLevel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseConfig([]byte(tt.yaml))
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, time.Hour, c.Pigeon.ContractTTL)
			require.Equal(t, 5*time.Second, c.PublishTimeout)
			require.Equal(t, -1, c.MaxHops)
			routes := c.routes()
			require.Equal(t, []natsbridge.Route{
				{Name: "orders-out", Direction: natsbridge.Out, Subject: "orders.events", NATSSubject: "bridge.orders", JetStream: true, Stream: "ORDERS",
					Selector: "/currency=GBP", MaxInFlight: 4},
				{Name: "orders-in", Direction: natsbridge.In, Subject: "orders.events", NATSSubject: "legacy.orders.>", Payload: natsbridge.PayloadData,
					Template: natsbridge.Template{Type: "order.created", Intent: "order_event", Classification: "internal"}},
			}, routes)
		})
	}
}

func TestCredentialFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "cred")
	require.NoError(t, os.WriteFile(file, []byte("  bridge-token \n"), 0o600))
	var c config
	c.Pigeon.CredentialFile = file
	cred, err := c.credential()
	require.NoError(t, err)
	require.Equal(t, "bridge-token", cred)
	c.Pigeon.CredentialFile = filepath.Join(dir, "missing")
	_, err = c.credential()
	require.ErrorContains(t, err, "pigeon.credentialFile")
	require.NoError(t, os.WriteFile(file, []byte("\n"), 0o600))
	c.Pigeon.CredentialFile = file
	_, err = c.credential()
	require.ErrorContains(t, err, "is empty")
}

// Startup errors are clear and have their exit codes.
func TestStartupErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
		return p
	}
	closedPort := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close()
		return l.Addr().String()
	}
	ns := runNATS(t)
	good := strings.Replace(goodConfig, "nats://127.0.0.1:4222", ns.ClientURL(), 1)
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no flag", nil, 2, "usage: pigeon-bridge --config FILE"},
		{"missing file", []string{"--config", filepath.Join(dir, "none.yaml")}, 2, "none.yaml: no such file"},
		{"unknown key", []string{"--config", write("u.yaml", goodConfig+"extra: 1\n")}, 2, "u.yaml: yaml: unmarshal errors:\n  line 27: field extra not found in type main.config"},
		{"invalid route", []string{"--config", write("r.yaml", strings.Replace(goodConfig, "name: orders-in", "name: orders.in", 1))}, 2, `route "orders.in": Name`},
		{"check", []string{"--config", write("g.yaml", goodConfig), "--check"}, 0, ""},
		{"NATS unreachable", []string{"--config", write("n.yaml", strings.Replace(goodConfig, "127.0.0.1:4222", closedPort(), 1))}, 1, "cannot reach NATS at nats://"},
		{"pigeon unreachable", []string{"--config", write("p.yaml", strings.Replace(good, "127.0.0.1:8787", closedPort(), 1))}, 1, "cannot start against pigeon at http://"},
		// Credentials in a URL are not shown (the NATS server takes any).
		{"NATS unreachable, credentials", []string{"--config", write("nc.yaml", strings.Replace(goodConfig, "127.0.0.1:4222", "alice:s3cret@"+closedPort(), 1))}, 1, "cannot reach NATS at nats://REDACTED@"},
		{"NATS URL invalid, credentials", []string{"--config", write("ni.yaml", strings.Replace(goodConfig, "127.0.0.1:4222", "alice:s3cret@[::1", 1))}, 1, "cannot reach NATS at <invalid URL>"},
		{"pigeon unreachable, credentials", []string{"--config", write("pc.yaml", strings.Replace(strings.Replace(good, "127.0.0.1:8787", "carol:s3cret@"+closedPort(), 1),
			"nats://", "nats://s3cret-token@", 1))}, 1, "cannot start against pigeon at http://REDACTED@"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			require.Equal(t, tt.code, run(ctx, tt.args, &out, &errb), errb.String())
			require.Contains(t, errb.String(), tt.want)
			require.NotContains(t, errb.String(), "s3cret")
			if tt.code == 0 {
				require.Equal(t, "pigeon-bridge: "+tt.args[1]+": 2 routes, ok\n", out.String())
			}
		})
	}
}

// The command binary against the HTTP server of `pigeon serve` (its
// /v1/ws endpoint) and a NATS server: a message crosses each way, and
// SIGTERM stops it with status 0.
func TestCommandEndToEnd(t *testing.T) {
	ns := runNATS(t)
	e := newEngine(t)
	hs := httptest.NewServer(pigeonserver.New(e, nil))
	t.Cleanup(hs.Close)
	dir := t.TempDir()
	credFile := filepath.Join(dir, "cred")
	require.NoError(t, os.WriteFile(credFile, []byte("bridge-token\n"), 0o600))
	cfg := filepath.Join(dir, "bridge.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`
pigeon: { url: "`+hs.URL+`", credentialFile: "`+credFile+`" }
nats: { url: "`+ns.ClientURL()+`" }
routes:
  - { name: orders-out, direction: out, subject: orders.events, natsSubject: cmd.out }
  - { name: orders-in, direction: in, subject: orders.events, natsSubject: cmd.in,
      template: { type: order.created, intent: order_event } }
`), 0o600))

	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	outMsgs, err := nc.SubscribeSync("cmd.out")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	mon, err := e.Connect(t.Context(), "monitor-token", []string{"orders.events"})
	require.NoError(t, err)
	var mu sync.Mutex
	var fromNATS []*pigeon.Message
	_, err = mon.Subscribe(t.Context(), "orders.events", func(_ context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		if d.Message.Source == "spiffe://test/ns/bridge/sa/nats-bridge" {
			fromNATS = append(fromNATS, d.Message)
		}
		return nil
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = mon.Close(context.Background()) })

	stderr := &syncWriter{w: &bytes.Buffer{}}
	cmd := exec.Command(os.Args[0], "--config", cfg)
	cmd.Env = append(os.Environ(), "PIGEON_BRIDGE_RUN_MAIN=1")
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	app, err := e.Connect(t.Context(), "app-token", []string{"orders.events"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = app.Close(context.Background()) })
	// Until the bridge subscribed, what is published is not carried (a
	// pubsub subscription starts at the end): publish until one crosses.
	var crossed *nats.Msg
	for deadline := time.Now().Add(30 * time.Second); crossed == nil && time.Now().Before(deadline); {
		_, err := app.Publish(t.Context(), &pigeon.Message{Type: "order.created", Subject: "orders.events", Intent: "order_event", Data: []byte(`{"n":1}`)})
		require.NoError(t, err)
		crossed, _ = outMsgs.NextMsg(200 * time.Millisecond)
	}
	require.NotNil(t, crossed, "nothing crossed to NATS: %s", stderr.String())
	require.Equal(t, "orders-out", crossed.Header.Get("Pigeon-Bridge"))

	require.NoError(t, nc.Publish("cmd.in", []byte(`{"orderId":"from-nats"}`)))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(fromNATS) > 0
	}, 30*time.Second, 10*time.Millisecond, "nothing crossed to Pigeon: %s", stderr.String())

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		exited <- err
		require.NoError(t, err, "exit status 0 on SIGTERM: %s", stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatal("the command did not stop on SIGTERM")
	}
	require.Contains(t, stderr.String(), "pigeon-bridge: starting")
	require.Contains(t, stderr.String(), "pigeon-bridge: stopped")
}

// syncWriter serialises writes to w, which the test reads.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

func runNATS(t *testing.T) *server.Server {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	require.NoError(t, err)
	s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// newEngine is a broker on the demo catalog plus orders.events, which
// bridge-token may publish and receive, app-token publish and
// monitor-token receive.
func newEngine(t *testing.T) *pigeon.Engine {
	cat := demo.Catalog()
	sp, err := policy.ParseSubject("orders.events.json", []byte(`{
  "name": "orders.events", "version": "v1", "mode": "pubsub", "intents": ["order_event"],
  "policy": {
    "publish": [ { "effect": "allow", "principals": ["spiffe://test/ns/bridge/sa/nats-bridge", "spiffe://test/ns/orders/sa/orders-app"] } ],
    "receive": [ { "effect": "allow", "principals": ["spiffe://test/ns/bridge/sa/nats-bridge", "spiffe://test/ns/ops/sa/monitor"] } ],
    "ack": [ { "effect": "allow", "principals": ["spiffe://test/ns/bridge/sa/nats-bridge", "spiffe://test/ns/ops/sa/monitor"] } ]
  }
}`))
	require.NoError(t, err)
	cat.Subjects = append(cat.Subjects, sp)
	tokens := append(demo.Tokens(),
		pigeon.StaticToken{Token: "bridge-token", Principal: "spiffe://test/ns/bridge/sa/nats-bridge"},
		pigeon.StaticToken{Token: "app-token", Principal: "spiffe://test/ns/orders/sa/orders-app"},
		pigeon.StaticToken{Token: "monitor-token", Principal: "spiffe://test/ns/ops/sa/monitor"})
	e, err := pigeon.New(t.Context(), &pigeon.Options{Authenticator: pigeon.NewStaticTokens(tokens...), Catalog: cat, Region: "uk"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	return e
}
