// Package readpool bounds the memory that reads in flight hold at once:
// the messages a replay, a pull receive or a page of records reads from
// the store, and their encoded answer, until the answer is written (or
// queued to a writer whose own budget holds it). The HTTP server and the
// WebSocket server each keep one.
package readpool

import (
	"container/list"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"pigeon"
)

// DefaultLimit is the bound of a pool when its owner's option is 0.
const DefaultLimit = 256 << 20

// DefaultWait is how long a read waits for room before it is refused.
const DefaultWait = 2 * time.Second

// Pool bounds the bytes reserved by reads in flight. A read reserves its
// most before it reads (Reserve), keeps, once it has read, about what its
// answer holds (Resize), and gives that back once the answer is written
// (Resize to 0). So a client that asks for large answers and reads them
// slowly pins at most the pool, not a multiple of the largest answer per
// connection or per frame in flight. A read that finds no room waits for
// it, within the pool's wait and its context, and is then refused
// RATE_LIMITED (REQUEST_TIMEOUT when its context ended) before anything is
// read, leased or settled. Waiting reads are served in the order they
// came, each woken only once its room is taken for it, so room given back
// wakes no read that would not fit.
//
// Its methods are safe for concurrent use.
type Pool struct {
	limit   int64 // <= 0: no bound
	wait    time.Duration
	logger  *slog.Logger
	name    string // the option that sets limit, for refusals and logs
	mu      sync.Mutex
	used    int64
	waiters list.List // of *waiter, oldest first
	refused atomic.Uint64
	warned  atomic.Int64 // unix nanoseconds of the last warning
}

// waiter is a read waiting for n bytes; granted is closed once they are
// reserved for it.
type waiter struct {
	n       int64
	granted chan struct{}
}

// New returns a pool of limit bytes (<= 0: no bound) whose reads wait up
// to wait for room; option names the setting of limit in refusals and
// logs.
func New(limit int64, wait time.Duration, option string, logger *slog.Logger) *Pool {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Pool{limit: limit, wait: wait, name: option, logger: logger}
}

// Reserve reserves n bytes (at most the whole pool, so that one read
// larger than the pool still runs, alone) and returns what it reserved,
// to give back through Resize. Without a bound it reserves nothing.
func (p *Pool) Reserve(ctx context.Context, n int64) (int64, error) {
	if p.limit <= 0 {
		return 0, nil
	}
	n = min(max(n, 1), p.limit)
	p.mu.Lock()
	if p.waiters.Len() == 0 && p.used+n <= p.limit {
		p.used += n
		p.mu.Unlock()
		return n, nil
	}
	w := &waiter{n: n, granted: make(chan struct{})}
	el := p.waiters.PushBack(w)
	p.mu.Unlock()
	timer := time.NewTimer(p.wait)
	defer timer.Stop()
	var ctxErr error
	select {
	case <-w.granted:
		return n, nil
	case <-ctx.Done():
		ctxErr = ctx.Err()
	case <-timer.C:
	}
	p.mu.Lock()
	select {
	case <-w.granted: // granted while giving up: give it back
		p.used -= n
	default:
		p.waiters.Remove(el)
	}
	p.grantLocked() // the next may fit now that this one is gone
	p.mu.Unlock()
	return 0, p.refuse(ctxErr)
}

// grantLocked reserves room for the waiting reads that fit, oldest first,
// and wakes them; it stops at the first that does not fit. Call it with
// mu held.
func (p *Pool) grantLocked() {
	for el := p.waiters.Front(); el != nil; el = p.waiters.Front() {
		w := el.Value.(*waiter)
		if p.used+w.n > p.limit {
			return
		}
		p.used += w.n
		p.waiters.Remove(el)
		close(w.granted)
	}
}

// refuse counts a read refused for want of room, logs it at most once a
// minute, and returns its error.
func (p *Pool) refuse(ctxErr error) error {
	n := p.refused.Add(1)
	if now := time.Now().UnixNano(); now-p.warned.Load() >= int64(time.Minute) {
		p.warned.Store(now)
		p.logger.Warn("read refused: the reads in flight hold "+p.name, "limit", p.limit, "refused", n)
	}
	if ctxErr != nil {
		return pigeon.WrapError(pigeon.CodeRequestTimeout, ctxErr, "the request ended while waiting for room to read")
	}
	err := pigeon.NewError(pigeon.CodeRateLimited,
		"the reads in flight hold all the memory the server allows them (%s); try again later", p.name)
	err.Details = map[string]any{"retryAfterMs": int64(time.Second / time.Millisecond)} // Retry-After: 1 over HTTP
	return err
}

// Resize turns a reservation of held bytes into one of n (0 gives it all
// back) and returns n. It may take the pool past its bound: the read it
// accounts for has been made.
func (p *Pool) Resize(held, n int64) int64 {
	if p.limit <= 0 || held == n {
		return n
	}
	p.mu.Lock()
	p.used += n - held
	if n < held {
		p.grantLocked()
	}
	p.mu.Unlock()
	return n
}

// InUse is the bytes reserved now.
func (p *Pool) InUse() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.used
}

// Refused counts the reads refused for want of room.
func (p *Pool) Refused() uint64 { return p.refused.Load() }

// Cost is about the memory an answer of items holds until it is written,
// when their variable parts (a message's data, a record's copy) come to
// bytes: those decoded and encoded, and a kilobyte for each item's
// envelope.
func Cost(items int, bytes int64) int64 { return 2*bytes + int64(items)*1024 }

// MessagesCost is Cost for an answer of msgs.
func MessagesCost(msgs []*pigeon.Message) int64 {
	var n int64
	for _, m := range msgs {
		n += int64(len(m.Data))
	}
	return Cost(len(msgs), n)
}

// ReadReserve is what a read of e reserves before it reads: twice the
// engine's MaxReadBytes (the messages and their encoding) and a little for
// envelopes.
func ReadReserve(e *pigeon.Engine) int64 { return 2*int64(e.MaxReadBytes()) + 1<<20 }
