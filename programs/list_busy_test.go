package programs_test

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/programs"
)

// goroutineIn reports whether a goroutine runs fn (a function's name as a
// stack shows it, with its opening parenthesis) and, when wait is not
// empty, waits in wait.
func goroutineIn(fn, wait string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) && (wait == "" || strings.Contains(g, wait)) {
			return true
		}
	}
	return false
}

// A deploy (or a removal) waits, holding its program's lock, for the
// deliveries in flight on the version it replaces, up to limits.timeoutMs
// (a minute at most). Get and List took each program's lock: one program
// busy with a long delivery stalled the listing of every account's
// programs for as long. They read the programs as of their last change
// instead: here they answer while the deploy still waits.
func TestListDoesNotWaitForABusyProgram(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	long := manifest(func(m *programs.Manifest) { m.Limits.TimeoutMs = 5000 })
	_, err := f.mg.Deploy(ctx, admin, "busy", long, modLoop)
	require.NoError(t, err)
	_, err = f.mg.Deploy(ctx, admin, "idle", manifest(group("idle")), modOK)
	require.NoError(t, err)
	f.publish(t, "orders.in", `{"n":1}`)
	eventually(t, func() bool { return goroutineIn("programs.(*instance).call(", "") }, "the delivery runs")

	deployed := make(chan error, 1)
	go func() {
		_, err := f.mg.Deploy(ctx, admin, "busy", long, modOK)
		deployed <- err
	}()
	eventually(t, func() bool { return goroutineIn("programs.(*version).retire(", "(*RWMutex).Lock") }, "the deploy waits for the delivery")

	list := f.mg.List(ctx)
	in, err := f.mg.Get(ctx, "busy")
	select {
	case err := <-deployed:
		t.Fatalf("List and Get answered only once the deploy was over (%v)", err)
	default:
	}
	require.Len(t, list, 2)
	require.NoError(t, err)
	require.Equal(t, 1, in.Version, "the version running until the deploy is over")
	require.NoError(t, <-deployed)
	in, err = f.mg.Get(ctx, "busy")
	require.NoError(t, err)
	require.Equal(t, 2, in.Version)
}
