package pigeon_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testlog"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

// fanoutPanicStore panics, once, the first time the engine's fan-out
// calls method ("Read" or "Bounds") on it, as a store of a third party
// with a bug might; every other call, and every call of another
// goroutine (a subscriber reading on its own), goes through.
type fanoutPanicStore struct {
	store.Store
	method string
	fired  *atomic.Bool
}

func (s fanoutPanicStore) Read(ctx context.Context, subject string, from uint64, limit int) ([]store.Message, error) {
	s.maybePanic("Read")
	return s.Store.Read(ctx, subject, from, limit)
}

func (s fanoutPanicStore) Bounds(ctx context.Context, subject string) (uint64, uint64, error) {
	s.maybePanic("Bounds")
	return s.Store.Bounds(ctx, subject)
}

func (s fanoutPanicStore) maybePanic(method string) {
	if method == s.method && calledByFanout() && s.fired.CompareAndSwap(false, true) {
		panic("store " + method + " failed on card 4111 1111 1111 1111")
	}
}

// calledByFanout reports whether the fan-out's goroutine is the caller.
func calledByFanout() bool {
	pc := make([]uintptr, 64)
	frames := runtime.CallersFrames(pc[:runtime.Callers(3, pc)])
	for {
		fr, more := frames.Next()
		if strings.HasPrefix(fr.Function, "pigeon.(*fanout).") {
			return true
		}
		if !more {
			return false
		}
	}
}

// TestFanoutPanicGoesOn: a store whose read panics once on the fan-out's
// goroutine no longer ends the process: the read of a message published
// on another node, which this node's recent cache does not hold (Read),
// or of where the subject ends, as the fan-out starts (Bounds). The panic
// is logged with its stack, the card number in it redacted, and the
// fan-out goes on: the message whose read panicked still reaches the
// subscriber, which reads it from the store on its own, and so does
// every message published after it; the fan-out starts (asking the store
// again at its next tick) and routes to the subscriber live again. Before,
// the panic ended the process; a fan-out whose first read failed was
// never started.
func TestFanoutPanicGoesOn(t *testing.T) {
	for _, method := range []string{"Read", "Bounds"} {
		t.Run(method, func(t *testing.T) {
			ctx := context.Background()
			h := &hub{leases: map[string]*hubLease{}}
			st := memory.New(nil)
			fired := &atomic.Bool{}
			logs := &testlog.Buffer{}
			var es [2]*pigeon.Engine
			for i := range es {
				o := transporttest.Options()
				o.Store, o.Cluster = nodeStore{Store: st, audit: memory.New(nil)}, h.node()
				if i == 1 {
					o.Store = fanoutPanicStore{Store: o.Store, method: method, fired: fired}
					o.Logger = logs.Logger()
				}
				e, err := pigeon.New(ctx, o)
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
				es[i] = e
			}

			got := make(chan string, 16)
			bob, err := es[1].Connect(ctx, "alice-token", []string{"chat.messages"})
			require.NoError(t, err)
			sub, err := bob.Subscribe(ctx, "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
				got <- string(d.Message.Data)
				return nil
			})
			require.NoError(t, err)
			alice, err := es[0].Connect(ctx, "alice-token", []string{"chat.messages"})
			require.NoError(t, err)
			// deliver publishes on the other node and requires the
			// subscriber to get it.
			deliver := func(room string) {
				t.Helper()
				_, err := alice.Publish(ctx, chatMessage(room))
				require.NoError(t, err)
				select {
				case m := <-got:
					require.Contains(t, m, `"room":"`+room+`"`)
				case <-time.After(30 * time.Second):
					t.Fatalf("%s never delivered: %v", room, sub.Err())
				}
			}
			// Until the fan-out's read panics (the subscriber, still
			// catching up, may read the first messages itself), each
			// message is delivered: the one whose read panicked too.
			for n := 0; !fired.Load(); n++ {
				require.Less(t, n, 1000, "the fan-out never read the store")
				deliver(fmt.Sprintf("r%d", n))
			}
			require.NoError(t, sub.Err())
			// The fan-out goes on: later messages reach the subscriber.
			for _, room := range []string{"after-1", "after-2", "after-3"} {
				deliver(room)
			}
			require.NoError(t, sub.Err())
			require.Eventually(t, func() bool {
				started, live := pigeon.FanoutState(es[1], "chat.messages")
				return started && live == 1
			}, 30*time.Second, 5*time.Millisecond, "the fan-out started and routes to the subscriber live")
			out := logs.String()
			require.Contains(t, out, "the fan-out panicked")
			require.Contains(t, out, "fanout.go:", "the stack is logged")
			require.Contains(t, out, pigeon.Redacted)
			require.NotContains(t, out, "4111 1111 1111 1111")
		})
	}
}
