package jetstream

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestPrefixDifferingOnlyInCaseRefused: stream and bucket names keep the
// prefix as given, but the NATS subjects of the store are the prefix in
// lower case, so two deployments whose prefixes differ only in case
// ("Pig", "PIG") share every message and audit subject and the cluster's
// event subject. The second opened as if alone: its first append to a
// subject the first one had used failed (JetStream refuses a stream whose
// subjects overlap another's), it blocked the first one's subjects it
// used first, the nodes of each received the other's notices; and on a
// file system that ignores case (macOS, Windows) their streams share
// directories. The second is refused at Open, naming the first.
func TestPrefixDifferingOnlyInCaseRefused(t *testing.T) {
	srv := runServer(t)
	ctx := t.Context()
	nc := connect(t, srv.ClientURL())
	first := freshPrefix() + "ab"
	a, err := Open(ctx, nc, &Options{Prefix: first, Node: "n1", Timeout: time.Second})
	require.NoError(t, err)
	_, _, err = a.Append(ctx, store.Message{Subject: "orders", ID: "m1", Time: time.Now().UTC()})
	require.NoError(t, err)

	second := strings.ToUpper(first)
	_, err = Open(ctx, nc, &Options{Prefix: second, Node: "n2", Timeout: time.Second})
	require.Error(t, err, "a prefix differing only in case shares the subjects")
	require.Contains(t, err.Error(), first)

	_, _, err = a.Append(ctx, store.Message{Subject: "orders", ID: "m2", Time: time.Now().UTC()})
	require.NoError(t, err, "the first deployment goes on")
	again, err := Open(ctx, nc, &Options{Prefix: first, Node: "n2", Timeout: time.Second})
	require.NoError(t, err, "the same prefix opens")
	require.NoError(t, again.Close(ctx))
}

// TestNodeDifferingOnlyInCaseRefused: a node's audit stream is named by
// the node as given; two nodes of one prefix whose names differ only in
// case ("n1", "N1") have audit streams whose names a file system that
// ignores case takes for one directory. The second is refused at Open.
func TestNodeDifferingOnlyInCaseRefused(t *testing.T) {
	srv := runServer(t)
	ctx := t.Context()
	nc := connect(t, srv.ClientURL())
	p := freshPrefix()
	_, err := Open(ctx, nc, &Options{Prefix: p, Node: "node-a"})
	require.NoError(t, err)
	_, err = Open(ctx, nc, &Options{Prefix: p, Node: "Node-A"})
	require.Error(t, err)
	require.Contains(t, err.Error(), "node-a")
	_, err = Open(ctx, nc, &Options{Prefix: p, Node: "node-b"})
	require.NoError(t, err, "another node opens")
}
