package programs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
)

const opI32Or = 0x72

// emitTwiceModule publishes msg twice at each delivery; it acknowledges
// the delivery when both were accepted.
func emitTwiceModule(msg string) []byte {
	const at, errBuf = 16, 512
	args := cat(i32c(at), i32c(int64(len(msg))), i32c(errBuf), i32c(64), []byte{opCall, 0})
	m := abiModule(cat(args, args, []byte{opI32Or}), 1)
	m.imports = []wimport{{module: "pigeon", name: "publish", params: []byte{tI32, tI32, tI32, tI32}, results: []byte{tI32}}}
	m.data = []wdata{{offset: at, bytes: []byte(msg)}}
	return m.encode()
}

// lineageFixture is the test fixture with a second Manager of opts, whose
// programs run on the fixture's engine; the fixture's own runs none.
func lineageFixture(t *testing.T, opts programs.Options) (*fixture, *programs.Manager) {
	f := newFixture(t, nil)
	opts.KV, opts.Cache = f.st, cache
	mg, err := programs.New(context.Background(), f.e, &opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, mg.Close(context.Background())) })
	return f, mg
}

// hopRefusals counts the emits of program name refused
// PROGRAM_LIMIT_EXCEEDED (audited publish.denied).
func hopRefusals(t *testing.T, f *fixture, name string) int {
	n := 0
	for _, r := range f.audited(t, pigeon.EventPublishDenied) {
		if r.Code == string(pigeon.CodeProgramLimit) && r.Ref == "program:"+name+"@1" {
			n++
		}
	}
	return n
}

// lastSeq is the sequence of the last message on subject.
func lastSeq(t *testing.T, f *fixture, subject string) uint64 {
	t.Helper()
	_, l, err := f.e.Bounds(context.Background(), subject)
	require.NoError(t, err)
	return l
}

const loopMsg = `{"type":"order","subject":"orders.in","intent":"record","classification":"internal","data":{}}`

// A program that publishes into its own route made one message the
// ancestor of messages without end: each delivery published one more
// into the route, delivered back to it (limits.maxEmits bounds one
// delivery, not a message's descendants). An emit more than
// Options.MaxHops programs deep is refused PROGRAM_LIMIT_EXCEEDED,
// audited publish.denied: the chain stops there.
func TestProgramLoopStopsAtMaxHops(t *testing.T) {
	const hops = 3
	f, mg := lineageFixture(t, programs.Options{MaxHops: hops})
	_, err := mg.Deploy(context.Background(), admin, "loop", manifest(func(m *programs.Manifest) { m.Publishes = []string{"orders.in"} }),
		emitModule("publish", loopMsg))
	require.NoError(t, err)
	f.publish(t, "orders.in", `{"n":1}`)
	last := func() uint64 { return lastSeq(t, f, "orders.in") }
	eventually(t, func() bool { return hopRefusals(t, f, "loop") > 0 || last() > 1+hops }, "the chain is cut")
	require.EqualValues(t, 1+hops, last(), "the client's message and one descendant per hop")
	require.Positive(t, hopRefusals(t, f, "loop"))
}

// Two programs, each publishing twice into the other's route, doubled
// one message's descendants at each hop. However deep Options.MaxHops
// lets them go, the programs emit at most Options.MaxDescendants messages
// from one message and its descendants, in all.
func TestProgramPingPongStopsAtMaxDescendants(t *testing.T) {
	const desc = 10
	f, mg := lineageFixture(t, programs.Options{MaxHops: 1000, MaxDescendants: desc})
	ctx := context.Background()
	other := `{"type":"order","subject":"orders.other","intent":"record","classification":"internal","data":{}}`
	_, err := mg.Deploy(ctx, admin, "ping", manifest(func(m *programs.Manifest) { m.Publishes = []string{"orders.other"} }),
		emitTwiceModule(other))
	require.NoError(t, err)
	_, err = mg.Deploy(ctx, admin, "pong", manifest(func(m *programs.Manifest) {
		m.Route.Subject, m.Publishes = "orders.other", []string{"orders.in"}
	}), emitTwiceModule(loopMsg))
	require.NoError(t, err)
	f.publish(t, "orders.in", `{"n":1}`)
	emitted := func() uint64 {
		_, in, err := f.e.Bounds(ctx, "orders.in")
		require.NoError(t, err)
		_, out, err := f.e.Bounds(ctx, "orders.other")
		require.NoError(t, err)
		return in - 1 + out
	}
	eventually(t, func() bool {
		return hopRefusals(t, f, "ping")+hopRefusals(t, f, "pong") > 0 || emitted() > desc
	}, "the tree is cut")
	eventually(t, func() bool { return emitted() >= desc }, "the emits admitted are published")
	require.EqualValues(t, desc, emitted(), "the programs emitted MaxDescendants messages from the client's")
	require.Positive(t, hopRefusals(t, f, "ping")+hopRefusals(t, f, "pong"))
}

// The lineage of only the last Options.LineageSize program messages is
// kept. Had a program's message whose lineage was forgotten started a
// lineage of its own, an amplifier publishing faster than its messages
// are delivered would have escaped both bounds; it counts instead as at
// the deepest hop, and its handler's emits are refused. Here the program
// publishes two messages into its own route at each delivery and only
// the second is remembered: the chain goes on through the second alone,
// MaxHops deep.
func TestForgottenLineageIsNotAFreshOne(t *testing.T) {
	const hops = 5
	f, mg := lineageFixture(t, programs.Options{MaxHops: hops, MaxDescendants: -1, LineageSize: 1})
	_, err := mg.Deploy(context.Background(), admin, "twice", manifest(func(m *programs.Manifest) { m.Publishes = []string{"orders.in"} }),
		emitTwiceModule(loopMsg))
	require.NoError(t, err)
	f.publish(t, "orders.in", `{"n":1}`)
	last := func() uint64 { return lastSeq(t, f, "orders.in") }
	// Every message but the last of each pair fails (its emits refused),
	// and so does the deepest: hops+1 deliveries quarantined.
	eventually(t, func() bool {
		return len(f.quarantined(t, pigeon.CodeDeliveryExhausted)) == hops+1 || last() > 1+2*hops
	}, "the chain is cut")
	require.EqualValues(t, 1+2*hops, last(), "the client's message and two per hop")
}
