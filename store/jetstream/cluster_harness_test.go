package jetstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	pigeonserver "pigeon/server"
	"pigeon/transport/transporttest"
)

// childEnv, when set, makes the test binary a nats-server node (see
// natsNode): the cluster tests run their NATS nodes as child processes,
// so that kill -9 really kills one, without building another binary.
const childEnv = "PIGEON_TEST_NATS_NODE"

// pigeonChildEnv, when set, makes the test binary a Pigeon node serving
// HTTP and WebSocket (see pigeonChild), so that a test can kill -9 one.
const pigeonChildEnv = "PIGEON_TEST_PIGEON_NODE"

func TestMain(m *testing.M) {
	if cfg := os.Getenv(childEnv); cfg != "" {
		runChild(cfg)
		return
	}
	if cfg := os.Getenv(pigeonChildEnv); cfg != "" {
		runPigeonChild(cfg)
		return
	}
	os.Exit(m.Run())
}

// pigeonChild is a Pigeon node run as a child process.
type pigeonChild struct {
	URLs   string `json:"urls"`
	Prefix string `json:"prefix"`
	Node   string `json:"node"`
	Addr   string `json:"-"` // reported by the child once it serves
	cmd    *exec.Cmd
}

// wsURL is the node's WebSocket endpoint.
func (p *pigeonChild) wsURL() string { return "ws://" + p.Addr + "/v1/ws" }

// runPigeonChild serves HTTP and WebSocket on a port of 127.0.0.1 it
// binds itself, reports the address, and runs until its parent goes away
// (stdin ends) or it is killed.
func runPigeonChild(cfg string) {
	var p pigeonChild
	if err := json.Unmarshal([]byte(cfg), &p); err != nil {
		childFail(err)
	}
	ctx := context.Background()
	s, err := Connect(ctx, p.URLs, &Options{Prefix: p.Prefix, Replicas: 3, Node: p.Node, Timeout: 2 * time.Second})
	if err != nil {
		childFail(err)
	}
	cl, err := NewCluster(ctx, s)
	if err != nil {
		childFail(err)
	}
	o := clusterOptions()
	o.Store, o.Cluster = s, cl
	e, err := pigeon.New(ctx, o)
	if err != nil {
		childFail(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		childFail(err)
	}
	go func() { _ = pigeonserver.New(e, nil).Serve(l) }()
	childReport(childReady{Addr: l.Addr().String()})
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// startPigeonChild starts Pigeon node name as a child process against the
// cluster and waits until it serves.
func (c *natsCluster) startPigeonChild(t testing.TB, i int, prefix, name string) *pigeonChild {
	t.Helper()
	p := &pigeonChild{URLs: c.urls(i), Prefix: prefix, Node: name}
	var r childReady
	p.cmd = startSelf(t, pigeonChildEnv, p, &r, 60*time.Second)
	t.Cleanup(p.kill)
	p.Addr = r.Addr
	return p
}

// kill kills the node's process with SIGKILL and waits for it.
func (p *pigeonChild) kill() {
	if p.cmd != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		p.cmd = nil
	}
}

// childReady is the one line, in JSON, a child writes to its stdout once
// it serves: the ports it bound, or why it could not serve.
type childReady struct {
	Client int    `json:"client,omitempty"` // nats-server: client port
	Route  int    `json:"route,omitempty"`  // nats-server: route port
	Addr   string `json:"addr,omitempty"`   // Pigeon: host:port of HTTP and WebSocket
	Err    string `json:"err,omitempty"`
}

var childReported sync.Once

// childReport writes r to the parent; only the first report of a child
// is written.
func childReport(r childReady) {
	childReported.Do(func() {
		b, _ := json.Marshal(r)
		_, _ = os.Stdout.Write(append(b, '\n'))
	})
}

// childFail reports err to the parent and ends the child.
func childFail(err error) {
	childReport(childReady{Err: err.Error()})
	os.Exit(1)
}

// startSelf starts the test binary as a child with env set to cfg in
// JSON, and waits up to d for its report, which it decodes into r. A
// child that reports an error, dies or stays silent is killed and fails
// t, with what it wrote to stderr. The child ends when its stdin closes,
// that is when this process dies.
func startSelf(t testing.TB, env string, cfg any, r *childReady, d time.Duration) *exec.Cmd {
	t.Helper()
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+string(b))
	var stderr bytes.Buffer // read only once Wait has returned
	cmd.Stderr = &stderr
	_, err = cmd.StdinPipe()
	require.NoError(t, err)
	out, w, err := os.Pipe()
	require.NoError(t, err)
	cmd.Stdout = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		out.Close()
		require.NoError(t, err)
	}
	lines := make(chan string, 1)
	go func() {
		defer out.Close()
		rd := bufio.NewReader(out)
		line, _ := rd.ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, rd)
	}()
	var why string
	select {
	case line := <-lines:
		switch err := json.Unmarshal([]byte(line), r); {
		case line == "":
			why = "it ended without a report"
		case err != nil:
			why = fmt.Sprintf("reported %q: %v", line, err)
		case r.Err != "":
			why = r.Err
		default:
			return cmd
		}
	case <-time.After(d):
		why = fmt.Sprintf("no report within %s", d)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if stderr.Len() > 0 {
		why += "\nstderr:\n" + stderr.String()
	}
	t.Fatalf("child %s=%s did not start: %s", env, b, why)
	return nil
}

// natsNode is one nats-server of a test cluster, run as a child process.
type natsNode struct {
	Name   string `json:"name"`
	Client int    `json:"client"` // 0 until the first start: any free port
	Route  int    `json:"route"`  // likewise
	Routes []int  `json:"routes"` // route ports of the other nodes
	Dir    string `json:"dir"`
	cmd    *exec.Cmd
}

func (n *natsNode) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.Client) }

// runChild runs one cluster node until its parent goes away (stdin ends)
// or it is killed. It binds the client and route ports of its config, or
// free ones where those are 0, and reports the ports it bound.
func runChild(cfg string) {
	var n natsNode
	if err := json.Unmarshal([]byte(cfg), &n); err != nil {
		childFail(err)
	}
	var routes []string
	for _, p := range n.Routes {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	if len(routes) == 0 {
		// The first node of a new cluster knows no other node's route
		// port: the others route to it. nats-server runs JetStream
		// clustered only with a configured route, so it gets one to port
		// 0, where nothing can listen; it retries it quietly.
		routes = []string{"nats://127.0.0.1:0"}
	}
	anyPort := func(p int) int {
		if p == 0 {
			return -1 // nats-server: a random free port
		}
		return p
	}
	s, err := server.NewServer(&server.Options{
		ServerName: n.Name, Host: "127.0.0.1", Port: anyPort(n.Client), JetStream: true, StoreDir: n.Dir, NoSigs: true, NoLog: true,
		Cluster: server.ClusterOpts{Name: "pigeon-test", Host: "127.0.0.1", Port: anyPort(n.Route)},
		Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
	})
	if err != nil {
		childFail(err)
	}
	// nats-server logs why it cannot serve (a port taken, say) as fatal.
	s.SetLogger(fatalLogger{}, false, false)
	s.Start()
	if !s.ReadyForConnections(20 * time.Second) {
		childFail(fmt.Errorf("nats node %s not ready for connections within 20s", n.Name))
	}
	childReport(childReady{Client: s.Addr().(*net.TCPAddr).Port, Route: s.ClusterAddr().Port})
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.Shutdown()
}

// fatalLogger is a nats-server child's logger: it drops every line but a
// fatal one, which it reports before ending the child, as nats-server's
// own logger ends the server.
type fatalLogger struct{}

func (fatalLogger) Noticef(string, ...any) {}
func (fatalLogger) Warnf(string, ...any)   {}
func (fatalLogger) Errorf(string, ...any)  {}
func (fatalLogger) Debugf(string, ...any)  {}
func (fatalLogger) Tracef(string, ...any)  {}
func (fatalLogger) Fatalf(format string, v ...any) {
	childFail(fmt.Errorf(format, v...))
}

// natsCluster is three nats-server nodes with routes and JetStream.
type natsCluster struct {
	nodes []*natsNode
}

func startNATSCluster(t testing.TB) *natsCluster {
	t.Helper()
	c := &natsCluster{}
	for i := range 3 {
		c.nodes = append(c.nodes, &natsNode{Name: fmt.Sprintf("n%d", i+1), Dir: t.TempDir()})
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.kill()
		}
	})
	// One after the other: each routes to those before it, whose route
	// ports it then knows, and NATS gossips the full mesh.
	for _, n := range c.nodes {
		c.start(t, n)
	}
	return c
}

// start (re)starts node n, with routes to the other nodes whose route
// ports are known, and waits until it takes clients. The first start
// takes free ports; a restart takes the same ones again, since clients
// and the other nodes know them, and fails t if it cannot.
func (c *natsCluster) start(t testing.TB, n *natsNode) {
	t.Helper()
	n.Routes = nil
	for _, o := range c.nodes {
		if o != n && o.Route != 0 {
			n.Routes = append(n.Routes, o.Route)
		}
	}
	var r childReady
	n.cmd = startSelf(t, childEnv, n, &r, 30*time.Second)
	n.Client, n.Route = r.Client, r.Route
}

// kill kills the node's process with SIGKILL and waits for it.
func (n *natsNode) kill() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	_ = n.cmd.Wait()
	n.cmd = nil
}

// urls lists every node's URL, node i's first.
func (c *natsCluster) urls(i int) string {
	out := []string{c.nodes[i].url()}
	for j, n := range c.nodes {
		if j != i {
			out = append(out, n.url())
		}
	}
	return strings.Join(out, ",")
}

// pigeonNode is one Pigeon engine on the cluster.
type pigeonNode struct {
	e  *pigeon.Engine
	s  *Store
	cl *Cluster
	nc *nats.Conn
}

// startPigeon starts Pigeon node i (audit chain "p<i+1>") against NATS
// node i, failing over to the others. The first node to start creates
// the streams; it waits for JetStream to elect its leaders.
func (c *natsCluster) startPigeon(t testing.TB, i int, prefix string, mutate func(*pigeon.Options)) *pigeonNode {
	opts := &Options{Prefix: prefix, Replicas: 3, Node: fmt.Sprintf("p%d", i+1), Timeout: 2 * time.Second}
	var s *Store
	require.Eventually(t, func() bool {
		var err error
		s, err = Connect(t.Context(), c.urls(i), opts, nats.DontRandomize(), nats.ReconnectWait(50*time.Millisecond), nats.Timeout(time.Second))
		return err == nil
	}, 60*time.Second, 200*time.Millisecond, "pigeon node %d could not open the store", i+1)
	cl, err := NewCluster(t.Context(), s)
	require.NoError(t, err)
	o := clusterOptions()
	o.Store, o.Cluster = s, cl
	if mutate != nil {
		mutate(o)
	}
	e, err := pigeon.New(context.Background(), o)
	require.NoError(t, err)
	p := &pigeonNode{e: e, s: s, cl: cl, nc: s.Conn()}
	t.Cleanup(func() { p.stop() })
	return p
}

// stop shuts the node down (a second stop is a no-op).
func (p *pigeonNode) stop() {
	_ = p.e.Shutdown(context.Background())
	_ = p.s.Close(context.Background())
}

// Role-governed subject of the cluster tests, beside the transporttest ones.
const (
	carol = "spiffe://chat/carol"
	dave  = "spiffe://chat/dave"
)

// ratedBurst is the burst of rated.chat's rate limit.
const ratedBurst = 6

func clusterOptions() *pigeon.Options {
	o := transporttest.Options()
	o.Catalog.Subjects = append(o.Catalog.Subjects, pigeon.SubjectPolicy{
		Name: "rooms.chat", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"chat"},
		Policy: map[pigeon.Operation][]pigeon.RuleSpec{
			pigeon.OpReceive: {{Effect: "allow", Roles: []string{"member"}}},
		},
	}, pigeon.SubjectPolicy{
		// jobs.run with an ack wait no slow round trip of a loaded test
		// machine outlasts: a lease never runs out under a handler.
		// A burst of ratedBurst messages per principal, refilled too slowly
		// to matter within a test.
		Name: "rated.chat", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"chat"},
		RateLimit: &pigeon.RateLimitPolicy{PerSecond: 0.001, Burst: ratedBurst},
		Policy: map[pigeon.Operation][]pigeon.RuleSpec{
			pigeon.OpPublish: {{Effect: "allow", Principals: []string{transporttest.Alice, transporttest.Bob}}},
		},
	}, pigeon.SubjectPolicy{
		Name: "jobs.cluster", Version: "v1", Mode: pigeon.ModeWorkQueue, Intents: []string{"run"},
		Delivery: pigeon.DeliveryPolicy{AckWaitMs: 10_000, Retry: pigeon.RetryPolicy{MaxAttempts: 5, Backoff: "fixed"}},
		Policy: map[pigeon.Operation][]pigeon.RuleSpec{
			pigeon.OpPublish: {{Effect: "allow", Principals: []string{transporttest.Boss}}},
			pigeon.OpReceive: {{Effect: "allow", Principals: []string{transporttest.Crew}}},
			pigeon.OpAck:     {{Effect: "allow", Principals: []string{transporttest.Crew}}},
		},
	})
	o.Authenticator = pigeon.NewStaticTokens(append(append(demo.Tokens(), suiteTokens()...), pigeon.StaticToken{Token: "carol-token", Principal: carol},
		pigeon.StaticToken{Token: "dave-token", Principal: dave})...)
	return o
}

// suiteTokens are transporttest's tokens: "alice-token" for Alice, and so on.
func suiteTokens() []pigeon.StaticToken {
	var out []pigeon.StaticToken
	for _, p := range []string{transporttest.Alice, transporttest.Bob, transporttest.Boss, transporttest.Crew} {
		out = append(out, pigeon.StaticToken{Token: strings.ToLower(p[strings.LastIndex(p, "/")+1:]) + "-token", Principal: p})
	}
	return out
}

// principal authenticates a token as the broker would.
func principal(t *testing.T, o *pigeon.Options, token string) *pigeon.Principal {
	p, err := o.Authenticator.Authenticate(t.Context(), token)
	require.NoError(t, err)
	return p
}
