package jetstream

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"pigeon/store"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// runServer starts an embedded single nats-server with JetStream on a
// random port of 127.0.0.1, stopped when t ends.
func runServer(t testing.TB) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	})
	require.NoError(t, err)
	s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "nats-server did not start")
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// connect dials url, reconnecting without end, with opts besides (an
// inbox prefix of the node's own, say), closing the connection when t
// ends.
func connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

var prefixes atomic.Int64

// freshPrefix returns a prefix no other test of this process uses.
func freshPrefix() string { return fmt.Sprintf("T%d", prefixes.Add(1)) }

// prefixNode opens node name of the cluster sharing prefix on the server
// at url, its streams in memory, and its Cluster.
func prefixNode(ctx context.Context, t testing.TB, url, prefix, name string) (*Store, *Cluster) {
	t.Helper()
	s, err := Open(ctx, connect(t, url), &Options{Prefix: prefix, Node: name, Memory: true})
	require.NoError(t, err)
	cl, err := NewCluster(ctx, s)
	require.NoError(t, err)
	return s, cl
}

// twoNodes are nodes a and b of one cluster, on a fresh prefix of a
// server of their own: a's store sa, both Clusters, the key of the work
// group their leases are of, and a context that ends with the test or
// after a minute.
type twoNodes struct {
	ctx  context.Context
	sa   *Store
	a, b *Cluster
	key  store.GroupKey
}

func startTwoNodes(t *testing.T) twoNodes {
	t.Helper()
	srv := runServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	prefix := freshPrefix()
	sa, a := prefixNode(ctx, t, srv.ClientURL(), prefix, "a")
	_, b := prefixNode(ctx, t, srv.ClientURL(), prefix, "b")
	return twoNodes{ctx: ctx, sa: sa, a: a, b: b, key: store.GroupKey{Subject: "jobs", Group: "workers"}}
}

// memoryNode opens, on srv, node "a"'s store under a fresh prefix (in
// memory) and its Cluster.
func memoryNode(ctx context.Context, t *testing.T, srv *server.Server) (*Store, *Cluster) {
	t.Helper()
	return prefixNode(ctx, t, srv.ClientURL(), freshPrefix(), "a")
}
