package pigeon

import (
	"context"
	"sync"
)

// auditWalks shares VerifyAudit's walks of the chain between callers. A
// walk reads every record, which on a long log takes as long as reading
// the log, so callers asking at once (auditors, a console, a script in a
// loop) must not each start one: at most one walk runs and one waits to
// start after it, and every caller gets the result of a walk that started
// after it asked, so that a record changed before a caller asked is never
// judged by a walk that had already passed it.
type auditWalks struct {
	mu      sync.Mutex
	running *auditWalk // nil: none
	next    *auditWalk // nil: none waits
}

// auditWalk is one walk: its result once done is closed.
type auditWalk struct {
	done    chan struct{}
	n       uint64
	err     error
	callers int // the calls waiting on it (e.verifies.mu)
}

// VerifyAudit walks the whole audit chain and reports how many records
// verify. Any altered, removed or reordered record fails with
// AUDIT_TAMPERED naming the first bad record. Calls made at once share
// walks: one that finds a walk running waits for the next one, which
// starts when the running one ends and serves every call that came
// meanwhile. A call whose ctx ends stops waiting; the walk goes on for the
// others, bounded by the engine's life.
func (e *Engine) VerifyAudit(ctx context.Context) (uint64, error) {
	if !e.ops.enter() { // Shutdown waits for the walk's start (inflight.go)
		return 0, errShutdown()
	}
	defer e.ops.leave()
	w := &e.verifies
	w.mu.Lock()
	var walk *auditWalk
	switch {
	case w.running == nil:
		walk = &auditWalk{done: make(chan struct{})}
		w.running = walk
		e.startWalk(walk)
	case w.next == nil:
		w.next = &auditWalk{done: make(chan struct{})}
		walk = w.next
	default:
		walk = w.next
	}
	walk.callers++
	w.mu.Unlock()
	select {
	case <-walk.done:
		return walk.n, walk.err
	case <-ctx.Done():
		return 0, storeError(ctx.Err())
	}
}

// startWalk runs walk, then the walk waiting after it, if any. Call it
// with e.verifies.mu held.
func (e *Engine) startWalk(walk *auditWalk) {
	started := e.goTracked(func() {
		// A panic of the walk (of the store, which the application may
		// supply) is a failed walk: its callers are answered, and the
		// next walk can start.
		var n uint64
		err := e.caught("the audit walk", func() (err error) {
			n, err = e.walkAudit(e.ctx)
			return err
		})
		if ErrorCode(err) == CodeRequestTimeout && e.ctx.Err() != nil {
			err = errShutdown() // cut short by Shutdown, not by the caller's time
		}
		w := &e.verifies
		w.mu.Lock()
		defer w.mu.Unlock()
		walk.n, walk.err = n, err
		close(walk.done)
		w.running, w.next = w.next, nil
		if w.running != nil {
			e.startWalk(w.running)
		}
	})
	if !started { // past Shutdown's wait for the engine's goroutines (goTracked)
		walk.err = errShutdown()
		close(walk.done)
		e.verifies.running = nil
	}
}
