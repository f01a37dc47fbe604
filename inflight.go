package pigeon

import (
	"context"
	"sync"
	"sync/atomic"

	"pigeon/store"
)

// Operations in flight.
//
// An operation that appends to the store, queues audit records or starts
// a goroutine of the engine's (a publish, a batch, a quarantine release,
// the handing over of a reply, a pull receive or replay, an ack or nack,
// a change of the access directory, an authentication, a negotiation, a
// renewal or revocation of a contract, a subscription, a catalog load, a
// purge, a walk of the audit chain, a record of a component's) enters the
// engine's count of operations in flight before its first step and leaves
// it once it has answered. Shutdown stops entries first: an operation
// that would enter after Shutdown began is refused SHUTTING_DOWN and does
// nothing, but for a component's record (Engine.Record: a server's
// access.denied, say), which is evidence of what was done already and is
// written all the same, uncounted (see below). Shutdown then waits,
// bounded by its context, until the operations that entered before have
// left, then for the engine's goroutines, and only then flushes the audit
// queue for the last time and closes the store it owns. So no operation
// queues a record after the last flush, and none answers "accepted" for a
// message whose publish.accepted record did not reach the store: on the
// memory store the record of an acceptance is queued with the append,
// and the writer that would write it has stopped by then.
//
// Entering and leaving cost one atomic add each on one word, which also
// carries the flag that Shutdown began: no lock on the publish path. A
// nested operation (PublishBatch's Publish of one message, the re-publish
// of a quarantine release, Connect's authentication) enters again, and is
// refused like any other once Shutdown began; its caller answers with
// that refusal.
//
// An operation stuck in the store (a full disk retried, a slow fsync)
// keeps Shutdown waiting until Shutdown's context is done: Shutdown then
// returns the context's error and neither flushes nor closes the store;
// a later Shutdown, once the operation has left, finishes. What the
// operation queued meanwhile is not left for that later Shutdown: an
// operation that leaves once the audit writer has stopped writes what is
// queued (writeLate). Every wait of Shutdown is bounded by its context
// the same way: for the operations, the goroutines, the revocations, the
// last write of the audit queue (flushAuditWithin: a writer at work
// stuck in the store included) and the store's close (onceWait).
//
// Revocations.
//
// A change that only takes access away (a contract or grant revoked, an
// account deleted, a role taken from an account, a role deleted or
// narrowed, an account's keys removed) must not be lost to a Shutdown:
// refused, the access it removes would stay in the store for the next
// start, or for the other nodes of a cluster. So once ops is closed it
// is counted apart (enterRevocation), in revokes, which Shutdown closes
// only once the operations and the goroutines have ended, just before
// its last flush: until then it is carried out and audited as before
// Shutdown (its records are waited for by the change itself, and what
// it queued otherwise is written as it leaves). After that, on the store
// the engine made, which Shutdown closes next, it is refused
// SHUTTING_DOWN, retryable; on the application's store, which stays
// open, it is carried out uncounted, as a component's record is.
//
// The engine's goroutines (goTracked) are counted the same way, apart:
// one is started only by an operation in flight, by another of them, or
// by New, so the count is above zero, or Shutdown has not yet stopped it,
// whenever one starts. Shutdown closes that count once the operations
// have left and waits until none runs. A start after that (which only a
// caller outside both could make) is refused rather than let run past
// Shutdown's wait: a sync.WaitGroup, which the goroutines were counted
// with, forbids an Add from zero concurrent with its Wait, and let such
// a goroutine escape the wait or panic.
//
// Audit records queued after the writer stopped.
//
// The background writer stops when Shutdown begins and writes, as it
// stops, what is queued. A record queued after that without waiting for
// its write (auditAsync: a delivery's, a refusal's, the summary of a run
// of refusals) is written by its caller (queueAsync), unless a writer at
// work takes it; one queued under the memory store's lock (an
// acceptance), or in a place the engine reserved for it, by the
// operation as it leaves (writeLate), or by Shutdown's last flush; one a
// caller waits for (audit, Record) by that caller, as ever. Runs of refusals are not counted any more once
// Shutdown began: their summaries are queued then, and every later
// refusal is written as it comes (coalescer.close), so that no refusal is
// left counted in a run that no flush will write. On a store Shutdown has
// closed such a write fails: the records are counted lost, as every
// failed write's, and the failure is logged.

// inflightClosed, added to inflight.n, marks that Shutdown began; the
// bits below it count the operations in flight.
const inflightClosed = 1 << 62

// inflight counts the engine's operations in flight, or its goroutines
// (see above). Its zero value is ready.
type inflight struct {
	n        atomic.Int64 // operations in flight, plus inflightClosed once closed
	mk, once sync.Once
	drained  chan struct{} // closed once closed with none in flight; made by mk
	// late, when set, runs when an operation leaves after close (before
	// it stops being counted).
	late func()
}

// enter counts one more operation in flight and reports true, or false
// once close was called (the operation must not go on).
func (f *inflight) enter() bool {
	if f.n.Add(1)&inflightClosed != 0 {
		f.out()
		return false
	}
	return true
}

// join counts one more goroutine and reports true, or false once close
// was called and none is counted: a goroutine started by a counted one
// joins after close, and Shutdown waits for it too; nothing joins once
// the wait may have ended. It is a compare-and-swap, for the start of a
// goroutine, not for the publish path.
func (f *inflight) join() bool {
	for {
		n := f.n.Load()
		if n == inflightClosed {
			return false
		}
		if f.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// leave counts one operation fewer, one that enter let in. After close
// it runs late first, so that what the operation queued is written
// before Shutdown learns it left.
func (f *inflight) leave() {
	if f.late != nil && f.n.Load()&inflightClosed != 0 {
		f.late()
	}
	f.out()
}

// out counts one fewer.
func (f *inflight) out() {
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

// enterRevocation counts a change that only takes access away (see
// above) and returns the function that counts it out: in ops while it is
// open, in revokes once it is closed, uncounted on the application's
// store once both are. On the store the engine made, once both are
// closed, it is SHUTTING_DOWN and the change must do nothing.
func (e *Engine) enterRevocation() (leave func(), err error) {
	switch {
	case e.ops.enter():
		return e.ops.leave, nil
	case e.revokes.enter():
		return e.revokes.leave, nil
	case !e.ownStore:
		return func() {}, nil
	}
	return nil, errShutdown()
}

// enterNarrowing counts a change that may give access or only take it
// away, which is known only under the lock that makes it (a role
// redefined, an account's keys replaced), and returns the function that
// counts it out and the error such a change meets if it gives access:
// SHUTTING_DOWN once Shutdown began (it is then counted as a revocation,
// enterRevocation), the audit log's error while the log cannot be written
// (the audit guard), nil otherwise. A change that only takes access away
// goes on in both cases. err refuses it outright, as enterRevocation does.
func (e *Engine) enterNarrowing(ctx context.Context) (leave func(), widening, err error) {
	leave = e.ops.leave
	if !e.ops.enter() {
		if leave, err = e.enterRevocation(); err != nil {
			return nil, nil, err
		}
		widening = errShutdown()
	}
	if guard := e.auditGuard(ctx); guard != nil && widening == nil {
		widening = guard
	}
	return leave, widening, nil
}

// flushAuditWithin is flushAudit bounded by ctx, for Shutdown's last
// flush: it returns ctx's error when ctx is done before what is queued
// is written, a writer at work stuck in the store included. The flush
// goes on without it: a later flush (a later Shutdown) waits for it as
// for any writer at work, and writes what it left.
func (e *Engine) flushAuditWithin(ctx context.Context) error {
	if ctx.Done() == nil {
		e.flushAudit() // a context that never ends: no goroutine
		return nil
	}
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		e.flushAudit()
	}()
	select {
	case <-flushed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// onceWait runs a function once, for the first caller of do, and lets
// every other caller wait for it, bounded by its own context. Its zero
// value is ready.
type onceWait struct {
	started atomic.Bool
	mk      sync.Once
	ch      chan struct{} // closed once the function returned; made by mk
}

func (o *onceWait) done() chan struct{} {
	o.mk.Do(func() { o.ch = make(chan struct{}) })
	return o.ch
}

// do runs fn and returns its error when it is the first call; a later
// call waits until fn has returned and returns nil, or ctx's error when
// ctx is done first. A panic of fn is the first call's: the others are
// let go all the same.
func (o *onceWait) do(ctx context.Context, fn func() error) error {
	if o.started.CompareAndSwap(false, true) {
		defer close(o.done())
		return fn()
	}
	select {
	case <-o.done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// queueAsync queues r for the writer without waiting for its write. Once
// the background writer has stopped (Shutdown), the caller writes it,
// unless a writer at work takes it (see above). r is ready to be queued
// (admitAudit).
func (e *Engine) queueAsync(r store.AuditRecord) {
	a := &e.auditor
	a.mu.Lock()
	a.pending = append(a.pending, r)
	a.queued++
	a.results = append(a.results, nil)
	if a.released {
		e.writeLateLocked()
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	a.kickWriter()
}

// writeLate writes what is queued once the background writer has
// stopped: the records an operation leaving after Shutdown began queued
// where it could not write them (under the memory store's lock).
func (e *Engine) writeLate() {
	a := &e.auditor
	a.mu.Lock()
	if a.released {
		e.writeLateLocked()
	}
	a.mu.Unlock()
}

// writeLateLocked writes what is queued, a.mu held, unless a writer is
// at work (it takes what is queued before it stops); a failed write is
// logged, whether or not the log was broken before: once Shutdown closed
// the store it owns, nothing else would tell of these records.
func (e *Engine) writeLateLocked() {
	a := &e.auditor
	if a.writing || !a.ready() {
		return
	}
	failed := a.failed
	e.writeAudit()
	if n := a.failed - failed; n > 0 {
		e.opts.Logger.Error("pigeon: audit records queued after the audit writer stopped (Shutdown) could not be written", "records", n, "err", a.broken.Load())
	}
}

// stopWriting ends the background writer's work, when Shutdown began:
// no place is reserved for an acceptance from now on (auditor.release),
// and what is queued is written (from now on, late records are written
// by their callers).
func (e *Engine) stopWriting() {
	e.auditor.release()
	e.flushAudit()
}
