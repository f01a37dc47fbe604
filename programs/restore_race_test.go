package programs_test

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
)

// callers reports which of fns (function names' suffixes) the caller's
// stack holds.
func callers(fns ...string) []bool {
	pc := make([]uintptr, 64)
	frames := runtime.CallersFrames(pc[:runtime.Callers(2, pc)])
	out := make([]bool, len(fns))
	for {
		fr, more := frames.Next()
		for i, fn := range fns {
			out[i] = out[i] || strings.HasSuffix(fr.Function, fn)
		}
		if !more {
			return out
		}
	}
}

// watchWaitsForLock reports whether a binding's watch waits for its
// program's lock.
func watchWaitsForLock() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "(*Mutex).Lock") && strings.Contains(g, "programs.(*Manager).watch(") {
			return true
		}
	}
	return false
}

// New binds each stored program again; a binding whose subscription ends
// at once is bound again by its watch, which reads the program's binding
// under the program's lock. restore set that binding without the lock,
// after the watch had started: the two raced (go test -race). Here the
// engine's clock, which it reads on the caller's goroutine, passes the
// contract's expiry while the subscription is being made, so the
// subscription ends as soon as it runs; restore's own audit record then
// waits until the watch binds again (it read the program's binding) or
// waits for the program's lock.
func TestRestoreBindsUnderTheProgramLock(t *testing.T) {
	var jumped, rebinding atomic.Bool
	var offset atomic.Int64
	f := newFixtureWith(t, nil, func(o *pigeon.Options) {
		o.Now = func() time.Time {
			in := callers("pigeon.(*Engine).admitAudit", "pigeon.(*Engine).subscribe", "programs.(*Manager).restore", "programs.(*Manager).watch")
			switch {
			case in[3]:
				rebinding.Store(true)
			case in[0] && in[1] && in[2] && !jumped.Load():
				offset.Store(int64(time.Hour))
				jumped.Store(true)
			case in[0] && in[2] && jumped.Load():
				for end := time.Now().Add(10 * time.Second); !rebinding.Load() && !watchWaitsForLock() && time.Now().Before(end); {
					time.Sleep(time.Millisecond)
				}
			}
			return time.Now().Add(time.Duration(offset.Load()))
		}
	})
	ctx := context.Background()
	_, err := f.mg.Deploy(ctx, admin, "p", manifest(), modOK)
	require.NoError(t, err)
	require.NoError(t, f.mg.Close(ctx))

	mg, err := programs.New(ctx, f.e, &programs.Options{KV: f.st, Cache: cache, RebindDelay: 10 * time.Millisecond})
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close(ctx)) }()
	require.True(t, jumped.Load(), "the clock passed the expiry within restore")
	eventually(t, func() bool { return len(f.audited(t, pigeon.EventProgramBound)) >= 2 }, "the ended binding is bound again")
	in, err := mg.Get(ctx, "p")
	require.NoError(t, err)
	require.True(t, in.Bound)
}
