package programs_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"

	"pigeon"
	"pigeon/programs"
)

// liveHeap is the Go heap in use once a collection has run.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// A program that recurses without end overflows wazero's call stack,
// which grows on the Go heap to ≈ 100 MB: its delivery fails
// PROGRAM_LIMIT_EXCEEDED naming the call stack, whether or not its memory
// is at limits.memoryPages (it once read "memory exhausted" when it was),
// while another program on the same route and the broker go on.
func TestStackOverflowFailsItsDelivery(t *testing.T) {
	var mu sync.Mutex
	var errs []error // the deliveries' failures
	mw := func(next pigeon.Handler) pigeon.Handler {
		return func(ctx context.Context, d *pigeon.Delivery) error {
			err := next(ctx, d)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			return err
		}
	}
	f := newFixture(t, nil, mw)
	ctx := context.Background()
	for _, p := range []struct {
		name  string
		pages uint32
	}{{"overflow-at-limit", 1}, {"overflow-below", 2}} {
		_, err := f.mg.Deploy(ctx, admin, p.name, manifest(group(p.name), func(m *programs.Manifest) {
			m.Limits.MemoryPages, m.Limits.TimeoutMs = p.pages, programs.MaxTimeout.Milliseconds() // -race copies stacks slowly
		}), recursiveModule(-1, 1))
		require.NoError(t, err, p.name)
	}
	_, err := f.mg.Deploy(ctx, admin, "ok", manifest(group("ok")), modOK)
	require.NoError(t, err)
	f.publish(t, "orders.in", `{"n":1}`)
	eventually(t, func() bool { return len(f.quarantined(t, pigeon.CodeDeliveryExhausted)) == 2 }, "each overflowing delivery is exhausted")
	mu.Lock()
	defer mu.Unlock()
	for _, n := range []string{"overflow-at-limit", "overflow-below"} {
		var seen int
		for _, err := range errs {
			if !strings.Contains(err.Error(), "program "+n+":") {
				continue
			}
			seen++
			require.Equal(t, pigeon.CodeProgramLimit, pigeon.ErrorCode(err), "%s: %v", n, err)
			require.Contains(t, err.Error(), "call stack exhausted", n)
			require.NotContains(t, err.Error(), "memory exhausted", n)
		}
		require.Equal(t, 2, seen, "%s: two attempts", n)
	}
	require.Len(t, f.ackedSeqs(t, "orders.in"), 1, "the sound program handled the message")
	for _, n := range []string{"overflow-at-limit", "overflow-below", "ok"} {
		in, err := f.mg.Get(ctx, n)
		require.NoError(t, err)
		require.True(t, in.Bound, n)
	}
}

// A delivery that recursed deep and returned leaves no grown call stack
// behind in its idle instance: wazero grows a function handle's stack on
// the Go heap (≈ 60 – 130 MB at the depth used here, the stack and the one
// it was copied from) and keeps it for the handle's next call, so a pooled
// instance would hold it, outside limits.memoryPages, for as long as it
// idles. The bound is loose: well under the one grown stack.
func TestIdleInstanceKeepsNoGrownStack(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	// The recursion takes ~0.1 s here, but far longer on a loaded machine:
	// past the default 1 s limit both attempts failed and nothing was acked.
	_, err := f.mg.Deploy(ctx, admin, "deep", manifest(func(m *programs.Manifest) { m.Limits.MemoryPages, m.Limits.TimeoutMs = 1, 30_000 }),
		recursiveModule(2_000_000, 1)) // 64 MB of stack at wazero's 32 bytes a frame (amd64)
	require.NoError(t, err)
	before := liveHeap()
	f.publish(t, "orders.in", `{"n":1}`)
	eventually(t, func() bool { return len(f.ackedSeqs(t, "orders.in")) == 1 }, "the deep delivery returns")
	grown := liveHeap() - before
	t.Logf("Go heap held after the delivery: %d MiB", grown>>20)
	require.Less(t, grown, int64(32<<20), "the idle instance holds no grown stack")
	in, err := f.mg.Get(ctx, "deep")
	require.NoError(t, err)
	require.True(t, in.Bound)
}

// Manifest.Memory counts a call stack reserve per instance beside its
// linear memory: a program of 10,000 one-page instances (625 MiB of linear
// memory, but up to 10,000 call stacks of ≈ 100 MB) is refused under the
// default 4 GiB, while 28 of them fit.
func TestProgramMemoryCountsStacks(t *testing.T) {
	m := manifest(func(m *programs.Manifest) { m.Route.MaxInFlight, m.Limits.MemoryPages = pigeon.MaxInFlightLimit, 1 })
	require.GreaterOrEqual(t, m.Memory(), int64(pigeon.MaxInFlightLimit)*150_000_000, "wazero's stack ceiling, and the stack it grew from, per instance")
	f := newFixture(t, nil)
	ctx := context.Background()
	_, err := f.mg.Deploy(ctx, admin, "wide", m, modOK)
	require.Equal(t, pigeon.CodeProgramLimit, pigeon.ErrorCode(err), "%v", err)
	m.Route.MaxInFlight = 28
	_, err = f.mg.Deploy(ctx, admin, "wide", m, modOK)
	require.NoError(t, err, "28 × (64 KiB + the stack reserve) fit 4 GiB")
	m.Route.MaxInFlight = 29
	_, err = f.mg.Deploy(ctx, admin, "wide", m, modOK)
	require.Equal(t, pigeon.CodeProgramLimit, pigeon.ErrorCode(err), "29 do not: %v", err)
}

// stackBytes reads the call stack wazero keeps in a function handle (on
// its compiler and its interpreter), so an instance replaces only the
// handles whose stack grew: a fresh handle keeps about 10 KiB, one that
// recursed deep tens of MB.
func TestStackBytesReadsWazero(t *testing.T) {
	ctx := context.Background()
	for _, cfg := range []wazero.RuntimeConfig{wazero.NewRuntimeConfigCompiler(), wazero.NewRuntimeConfigInterpreter()} {
		rt := wazero.NewRuntimeWithConfig(ctx, cfg)
		mod, err := rt.Instantiate(ctx, recursiveModule(1000, 1))
		require.NoError(t, err)
		fn := mod.ExportedFunction("pigeon_handle")
		_, err = fn.Call(ctx, 0, 0)
		require.NoError(t, err)
		require.Less(t, programs.StackBytes(fn), 1<<20, "a shallow call keeps a small stack")
		require.NoError(t, rt.Close(ctx))
	}
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler())
	defer func() { require.NoError(t, rt.Close(ctx)) }()
	mod, err := rt.Instantiate(ctx, recursiveModule(2_000_000, 1))
	require.NoError(t, err)
	fn := mod.ExportedFunction("pigeon_handle")
	_, err = fn.Call(ctx, 0, 0)
	require.NoError(t, err)
	require.Greater(t, programs.StackBytes(fn), 16<<20, "a deep one keeps the stack it grew")
}
