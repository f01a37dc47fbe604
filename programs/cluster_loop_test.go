package programs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/programs"
	"pigeon/store/memory"
)

// Two Managers on one engine stand for two nodes of a cluster, each
// running one of two programs that publish into each other's route. The
// lineage was each Manager's own: a message one published reached the
// other as a message from outside the programs, at depth 0, so the pair
// went on without end, however small Options.MaxHops.
func TestProgramLoopAcrossManagersStopsAtMaxHops(t *testing.T) {
	const hops = 3
	f := newFixture(t, nil)
	ctx := context.Background()
	a, b := twoManagers(t, f, hops)
	other := `{"type":"order","subject":"orders.other","intent":"record","classification":"internal","data":{}}`
	_, err := a.Deploy(ctx, admin, "ping", manifest(func(m *programs.Manifest) { m.Publishes = []string{"orders.other"} }), emitModule("publish", other))
	require.NoError(t, err)
	_, err = b.Deploy(ctx, admin, "pong", manifest(func(m *programs.Manifest) {
		m.Route.Subject, m.Publishes = "orders.other", []string{"orders.in"}
	}), emitModule("publish", loopMsg))
	require.NoError(t, err)
	f.publish(t, "orders.in", `{"n":1}`)
	emitted := func() uint64 { return lastSeq(t, f, "orders.in") - 1 + lastSeq(t, f, "orders.other") }
	eventually(t, func() bool { return hopRefusals(t, f, "ping")+hopRefusals(t, f, "pong") > 0 || emitted() > 10*hops }, "the chain is cut")
	require.EqualValues(t, hops, emitted(), "one message per hop, across both nodes")
}

// twoManagers starts two Managers on f's engine, with MaxHops hops, as
// two nodes of a cluster would run them.
func twoManagers(t *testing.T, f *fixture, hops int) (a, b *programs.Manager) {
	t.Helper()
	node := func() *programs.Manager {
		mg, err := programs.New(context.Background(), f.e, &programs.Options{KV: memory.New(nil), Cache: cache, MaxHops: hops})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, mg.Close(context.Background())) })
		return mg
	}
	return node(), node()
}
