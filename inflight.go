package pigeon

import (
	"context"
	"sync"
	"sync/atomic"
)

// Operations in flight.
//
// An operation that appends to the store or queues audit records (a
// publish, a batch, a quarantine release, the handing over of a reply, a
// pull receive or replay, an ack or nack, a change of the access
// directory) enters the engine's count of operations in flight before
// its first step and leaves it once it has answered. Shutdown stops
// entries first: an operation that would enter after Shutdown began is
// refused SHUTTING_DOWN and does nothing. It then waits, bounded by its
// context, until the operations that entered before have left, and only
// then flushes the audit queue for the last time and closes the store it
// owns. So no operation queues a record after the last flush, and none
// answers "accepted" for a message whose publish.accepted record did not
// reach the store: on the memory store the record of an acceptance is
// queued with the append, and the writer that would write it has
// stopped by then.
//
// Entering and leaving cost one atomic add each on one word, which also
// carries the flag that Shutdown began: no lock on the publish path. A
// nested operation (PublishBatch's Publish of one message, the re-publish
// of a quarantine release) enters again, and is refused like any other
// once Shutdown began; its caller answers with that refusal.
//
// An operation stuck in the store (a full disk retried, a slow fsync)
// keeps Shutdown waiting until Shutdown's context is done: Shutdown then
// returns the context's error and neither flushes nor closes the store;
// a later Shutdown, once the operation has left, finishes.

// inflightClosed, added to inflight.n, marks that Shutdown began; the
// bits below it count the operations in flight.
const inflightClosed = 1 << 62

// inflight counts the engine's operations in flight (see above). Its zero
// value is ready.
type inflight struct {
	n        atomic.Int64 // operations in flight, plus inflightClosed once closed
	mk, once sync.Once
	drained  chan struct{} // closed once closed with none in flight; made by mk
}

// enter counts one more operation in flight and reports true, or false
// once close was called (the operation must not go on).
func (f *inflight) enter() bool {
	if f.n.Add(1)&inflightClosed != 0 {
		f.leave()
		return false
	}
	return true
}

// leave counts one operation fewer, one that enter let in (or refused).
func (f *inflight) leave() {
	if f.n.Add(-1) == inflightClosed {
		f.drain()
	}
}

// close refuses every later enter. It may be called more than once.
func (f *inflight) close() {
	if old := f.n.Or(inflightClosed); old&^inflightClosed == 0 {
		f.drain()
	}
}

// drain marks that none is in flight any more, once closed.
func (f *inflight) drain() { f.once.Do(func() { close(f.done()) }) }

// done is closed once close was called and no operation is in flight.
func (f *inflight) done() chan struct{} {
	f.mk.Do(func() { f.drained = make(chan struct{}) })
	return f.drained
}

// wait waits, after close, until no operation is in flight, or returns
// ctx's error when ctx is done first.
func (f *inflight) wait(ctx context.Context) error {
	select {
	case <-f.done():
		return nil
	default:
	}
	select {
	case <-f.done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
