package ws

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWorkersRunOpsAtOnce: an op never waits for another, however many
// are running, and a parked worker takes the next op.
func TestWorkersRunOpsAtOnce(t *testing.T) {
	w := newWorkers(2)
	const n = 20
	release := make(chan struct{})
	var started, done sync.WaitGroup
	started.Add(n)
	done.Add(n)
	for range n {
		w.run(func() {
			started.Done()
			<-release
			done.Done()
		})
	}
	// Every op runs while the others block: none waits for a worker.
	started.Wait()
	close(release)
	done.Wait()

	// Two park; the other eighteen end.
	require.Eventually(t, func() bool { return w.idle.Load() == 2 }, 5*time.Second, time.Millisecond)

	// The parked ones take the next ops, and park again after them.
	ran := make(chan int, 2)
	var again sync.WaitGroup
	again.Add(2)
	for i := range 2 {
		w.run(func() { ran <- i; again.Done() })
	}
	again.Wait()
	require.ElementsMatch(t, []int{0, 1}, []int{<-ran, <-ran})
	require.Eventually(t, func() bool { return w.idle.Load() == 2 }, 5*time.Second, time.Millisecond)
}

// TestWorkersHoldNothingOfAnOp: a parked worker keeps no reference to the
// op it ran, so what the op held (a connection, a frame) can be collected.
func TestWorkersHoldNothingOfAnOp(t *testing.T) {
	w := newWorkers(1)
	collected := make(chan struct{})
	func() {
		held := new([1 << 16]byte)
		runtime.AddCleanup(held, func(struct{}) { close(collected) }, struct{}{})
		ran := make(chan struct{})
		w.run(func() { held[0] = 1; close(ran) })
		<-ran
	}()
	require.Eventually(t, func() bool { return w.idle.Load() == 1 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool {
		runtime.GC()
		select {
		case <-collected:
			return true
		default:
			return false
		}
	}, 5*time.Second, 10*time.Millisecond)
}
