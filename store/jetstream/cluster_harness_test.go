package jetstream

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
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
	Addr   string `json:"addr"`
	cmd    *exec.Cmd
}

// wsURL is the node's WebSocket endpoint.
func (p *pigeonChild) wsURL() string { return "ws://" + p.Addr + "/v1/ws" }

func runPigeonChild(cfg string) {
	var p pigeonChild
	if err := json.Unmarshal([]byte(cfg), &p); err != nil {
		panic(err)
	}
	ctx := context.Background()
	s, err := Connect(ctx, p.URLs, &Options{Prefix: p.Prefix, Replicas: 3, Node: p.Node, Timeout: 2 * time.Second})
	if err != nil {
		panic(err)
	}
	cl, err := NewCluster(ctx, s)
	if err != nil {
		panic(err)
	}
	o := clusterOptions()
	o.Store, o.Cluster = s, cl
	e, err := pigeon.New(ctx, o)
	if err != nil {
		panic(err)
	}
	l, err := net.Listen("tcp", p.Addr)
	if err != nil {
		panic(err)
	}
	go func() { _ = pigeonserver.New(e, nil).Serve(l) }()
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// startPigeonChild starts Pigeon node name as a child process against the
// cluster and waits until it serves.
func (c *natsCluster) startPigeonChild(t testing.TB, i int, prefix, name string) *pigeonChild {
	p := &pigeonChild{URLs: c.urls(i), Prefix: prefix, Node: name, Addr: fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0])}
	cfg, err := json.Marshal(p)
	require.NoError(t, err)
	p.cmd = startSelf(t, pigeonChildEnv, string(cfg))
	t.Cleanup(p.kill)
	require.Eventually(t, func() bool {
		conn, err := net.Dial("tcp", p.Addr)
		if err == nil {
			conn.Close()
		}
		return err == nil
	}, 60*time.Second, 50*time.Millisecond, "pigeon node %s did not start", name)
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

// startSelf starts the test binary as a child with env=cfg; the child
// ends when its stdin closes, that is when this process dies.
func startSelf(t testing.TB, env, cfg string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+cfg)
	_, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	return cmd
}

// natsNode is one nats-server of a test cluster, run as a child process.
type natsNode struct {
	Name   string `json:"name"`
	Client int    `json:"client"`
	Route  int    `json:"route"`
	Routes []int  `json:"routes"`
	Dir    string `json:"dir"`
	cmd    *exec.Cmd
}

func (n *natsNode) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.Client) }

// runChild runs one cluster node until its parent goes away (stdin ends)
// or it is killed.
func runChild(cfg string) {
	var n natsNode
	if err := json.Unmarshal([]byte(cfg), &n); err != nil {
		panic(err)
	}
	routes := make([]string, len(n.Routes))
	for i, p := range n.Routes {
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", p)
	}
	s, err := server.NewServer(&server.Options{
		ServerName: n.Name, Host: "127.0.0.1", Port: n.Client, JetStream: true, StoreDir: n.Dir, NoSigs: true, NoLog: true,
		Cluster: server.ClusterOpts{Name: "pigeon-test", Host: "127.0.0.1", Port: n.Route},
		Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
	})
	if err != nil {
		panic(err)
	}
	s.Start()
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.Shutdown()
}

// freePorts returns n ports free on 127.0.0.1 just now.
func freePorts(t testing.TB, n int) []int {
	var out []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}

// natsCluster is three nats-server nodes with routes and JetStream.
type natsCluster struct {
	nodes []*natsNode
}

func startNATSCluster(t testing.TB) *natsCluster {
	ports := freePorts(t, 6)
	c := &natsCluster{}
	for i := range 3 {
		c.nodes = append(c.nodes, &natsNode{Name: fmt.Sprintf("n%d", i+1), Client: ports[i], Route: ports[3+i], Routes: ports[3:], Dir: t.TempDir()})
	}
	for _, n := range c.nodes {
		c.start(t, n)
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.kill()
		}
	})
	return c
}

// start (re)starts node n and waits until it takes clients.
func (c *natsCluster) start(t testing.TB, n *natsNode) {
	cfg, err := json.Marshal(n)
	require.NoError(t, err)
	n.cmd = startSelf(t, childEnv, string(cfg))
	require.Eventually(t, func() bool {
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", n.Client))
		if err == nil {
			conn.Close()
		}
		return err == nil
	}, 20*time.Second, 20*time.Millisecond, "nats node %s did not start", n.Name)
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
