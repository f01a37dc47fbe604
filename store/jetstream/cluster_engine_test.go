package jetstream

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"pigeon"
)

// clusterEngine opens opts.Node's store on nc, its Cluster, and an
// engine on them with clusterOptions, which edit, when not nil, changes
// first (a logger, the store or the Cluster wrapped). The engine is shut
// down and the store closed when the test ends.
func clusterEngine(ctx context.Context, t *testing.T, nc *nats.Conn, opts *Options, edit func(*pigeon.Options)) *pigeonNode {
	t.Helper()
	s, err := Open(ctx, nc, opts)
	require.NoError(t, err)
	cl, err := NewCluster(ctx, s)
	require.NoError(t, err)
	o := clusterOptions()
	o.Store, o.Cluster = s, cl
	if edit != nil {
		edit(o)
	}
	e, err := pigeon.New(ctx, o)
	require.NoError(t, err)
	p := &pigeonNode{e: e, s: s, cl: cl, nc: nc}
	t.Cleanup(p.stop)
	return p
}
