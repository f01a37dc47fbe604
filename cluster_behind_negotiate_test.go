package pigeon_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store/memory"
)

// Negotiations refused STORE_UNAVAILABLE while a node's directory is
// behind take nothing from the principal's negotiation rate: a client
// that retries while the node cannot be sure of its directory finds its
// whole burst once the node is vouched for again, not RATE_LIMITED.
func TestNegotiationWhileBehindSpendsNoRate(t *testing.T) {
	h := &hub{leases: map[string]*hubLease{}}
	n := &vouchingNode{hubNode: h.node()} // not vouched for until it beats
	o := accessFixtureOptions()
	o.Store, o.Cluster = nodeStore{Store: memory.New(nil), audit: memory.New(nil)}, n
	o.NegotiateRate = pigeon.RateLimitPolicy{PerSecond: 0.001, Burst: 2}
	e, err := pigeon.New(ctx, o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	for range 5 {
		_, err = e.Connect(ctx, "bob-token", []string{"chat.messages"})
		requireCode(t, err, pigeon.CodeStoreUnavailable)
	}
	n.beat()
	t.Cleanup(func() { n.cut(false) })
	s := connectEventually(t, e, "bob-token", "chat.messages")
	require.NoError(t, s.Close(ctx))
	s, err = e.Connect(ctx, "bob-token", []string{"chat.messages"})
	require.NoError(t, err, "the burst is whole: the refusals while behind took none of it")
	require.NoError(t, s.Close(ctx))
	_, err = e.Connect(ctx, "bob-token", []string{"chat.messages"})
	requireCode(t, err, pigeon.CodeRateLimited)
}
