package ws

import "sync/atomic"

// workers runs the server's ops (a publish, a request, a subscribe…) on
// goroutines that outlive them. A goroutine started for each op begins on
// a small stack and grows it, copying it each time, on the way through
// the gate chain and the store: about a tenth of a publish's round trip
// over the socket. A worker keeps the stack it grew for the next op.
//
// An op goes to a worker parked waiting for one, or else to a goroutine
// started for it, which then parks as a worker in turn. At most maxIdle
// workers park at once; a worker that finds them all there ends. Parked
// workers are shared by every server of the process and hold no
// reference to any of them, so a server that is never shut down leaves
// nothing behind but at most maxIdle parked goroutines.
//
// It is safe for concurrent use.
type workers struct {
	jobs    chan func()
	idle    atomic.Int32
	maxIdle int32
}

// opWorkers is the pool of every server's ops.
var opWorkers = newWorkers(64)

func newWorkers(maxIdle int32) *workers {
	return &workers{jobs: make(chan func()), maxIdle: maxIdle}
}

// run runs fn on a worker, at once: on a parked one, or on a new one.
func (w *workers) run(fn func()) {
	select {
	case w.jobs <- fn:
	default:
		go w.work(fn)
	}
}

func (w *workers) work(fn func()) {
	for fn != nil {
		fn()
		fn = w.park()
	}
}

// park waits for the next op, or returns nil when maxIdle workers are
// parked already. A parked worker holds nothing of the op it ran. The
// leak checks of tests know a parked worker by this function
// (internal/leakcheck), inlined or not: a traceback names inlined
// functions too.
func (w *workers) park() func() {
	if w.idle.Add(1) > w.maxIdle {
		w.idle.Add(-1)
		return nil
	}
	fn := <-w.jobs
	w.idle.Add(-1)
	return fn
}
