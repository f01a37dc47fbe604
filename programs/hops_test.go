package programs_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
)

// A message's depth travels with it as its hops, which the broker sets
// from the publishing caller. A client that wrote a large "hops" would
// have a program's emits refused as too deep; a program that wrote 0 in
// what it emits would start the count again on the next node. Neither
// is what the broker keeps: the program's message on orders.out is one
// hop deep, whatever either wrote.
func TestPublisherHopsDoNotReachPrograms(t *testing.T) {
	for _, tc := range []struct{ name, sent, emitted string }{
		{"the client writes hops", `,"hops":99`, ``},
		{"the program writes hops 0", ``, `,"hops":0`},
		{"the program writes hops", ``, `,"hops":4294967295`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			ctx := context.Background()
			out := `{"type":"order","subject":"orders.out","intent":"record","classification":"internal","data":{}` + tc.emitted + `}`
			_, err := f.mg.Deploy(ctx, admin, "fwd", manifest(), emitModule("publish", out))
			require.NoError(t, err)
			got := f.collect(t, "orders.out")
			m, err := pigeon.DecodeMessage([]byte(`{"type":"order","subject":"orders.in","intent":"record","classification":"internal","data":{}` + tc.sent + `}`))
			require.NoError(t, err)
			res, err := f.cli.Publish(ctx, m)
			require.NoError(t, err)
			require.Zero(t, res.Message.Hops, "the client's message")
			emitted := next(t, got)
			require.EqualValues(t, 1, emitted.Hops, "the program's message")
			require.Zero(t, hopRefusals(t, f, "fwd"))
		})
	}
}

// Two Managers, as TestProgramLoopAcrossManagersStopsAtMaxHops, whose
// programs write "hops":0 in every message they emit: the broker sets
// the hops from the caller, so the chain still stops MaxHops deep.
func TestProgramCannotResetItsHops(t *testing.T) {
	const hops = 3
	f := newFixture(t, nil)
	ctx := context.Background()
	a, b := twoManagers(t, f, hops)
	reset := func(msg string) string { return strings.TrimSuffix(msg, "}") + `,"hops":0}` }
	other := `{"type":"order","subject":"orders.other","intent":"record","classification":"internal","data":{}}`
	_, err := a.Deploy(ctx, admin, "ping", manifest(func(m *programs.Manifest) { m.Publishes = []string{"orders.other"} }), emitModule("publish", reset(other)))
	require.NoError(t, err)
	_, err = b.Deploy(ctx, admin, "pong", manifest(func(m *programs.Manifest) {
		m.Route.Subject, m.Publishes = "orders.other", []string{"orders.in"}
	}), emitModule("publish", reset(loopMsg)))
	require.NoError(t, err)
	f.publish(t, "orders.in", `{"n":1}`)
	emitted := func() uint64 { return lastSeq(t, f, "orders.in") - 1 + lastSeq(t, f, "orders.other") }
	eventually(t, func() bool { return hopRefusals(t, f, "ping")+hopRefusals(t, f, "pong") > 0 || emitted() > 10*hops }, "the chain is cut")
	require.EqualValues(t, hops, emitted(), "one message per hop, across both nodes")
}
