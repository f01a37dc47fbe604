// Package readpool bounds the memory that reads in flight hold at once,
// in all and per principal: the messages a replay, a pull receive or a
// page of records reads from the store, and their encoded answer, until
// the answer is written (or queued to a writer whose own budget holds
// it). The HTTP server and the WebSocket server each keep one.
package readpool

import (
	"container/heap"
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

// DefaultShareDivisor divides a pool's bound into the share of one key
// when its owner's option is 0: a quarter, so that one principal reading
// slowly leaves three quarters of the pool to the others.
const DefaultShareDivisor = 4

// Key is whom a read is for: its principal's id, or for an anonymous
// caller the source it comes from. It is comparable, for map keys, and
// costs no allocation.
type Key struct {
	Principal string
	Source    pigeon.Source
}

// KeyOf is the key of a read for p, or for one from src when p is nil.
func KeyOf(p *pigeon.Principal, src pigeon.Source) Key {
	if p != nil {
		return Key{Principal: p.ID}
	}
	return Key{Source: src}
}

// DefaultWait is how long a read waits for room before it is refused.
const DefaultWait = 2 * time.Second

// Options configure a Pool.
type Options struct {
	// Limit bounds the bytes the pool's reads reserve at once (<= 0: no
	// bound, and nothing is counted).
	Limit int64
	// Share bounds the bytes the reads of one key (a principal) reserve
	// at once (<= 0 or above Limit: Limit, no share of its own). See
	// ShareOf for the usual value.
	Share int64
	// Wait is how long a read waits for room before it is refused.
	Wait time.Duration
	// LimitName and ShareName name the settings of Limit and Share in
	// refusals and logs.
	LimitName, ShareName string
	// Logger receives a warning, at most once a minute, when reads are
	// refused. Default: discard.
	Logger *slog.Logger
}

// ShareOf is the share of one key in a pool of limit bytes when its
// owner's option is share: limit/DefaultShareDivisor when share is 0,
// the whole pool when share is negative, never less than reserve (one
// read's reservation, so that a single read still runs) nor more than
// limit.
func ShareOf(limit, share, reserve int64) int64 {
	switch {
	case limit <= 0:
		return 0
	case share < 0:
		return limit
	case share == 0:
		share = limit / DefaultShareDivisor
	}
	return min(max(share, reserve), limit)
}

// Pool bounds the bytes reserved by reads in flight, in all and per key
// (the principal a read is for). A read reserves its most before it reads
// (Reserve), keeps, once it has read, about what its answer holds
// (Resize), and gives that back once the answer is written (Resize to 0).
// So a client that asks for large answers and reads them slowly pins at
// most its share of the pool, not a multiple of the largest answer per
// connection or per frame in flight, and never the room of the others.
// A read that finds no room waits for it, within the pool's wait and its
// context, and is then refused RATE_LIMITED (REQUEST_TIMEOUT when its
// context ended) before anything is read, leased or settled.
//
// Waiting reads are served in the order they came, each woken only once
// its room is taken for it, so room given back wakes no read that would
// not fit. The reads of one key are served in their order too, but a read
// that would take its key past the share waits aside, until its key's
// own reads give room back: it holds no place in the line, and the reads
// of other keys that came after it go first.
//
// Its methods are safe for concurrent use.
type Pool struct {
	limit   int64 // <= 0: no bound
	share   int64 // of one key, in (0, limit]
	wait    time.Duration
	logger  *slog.Logger
	names   [2]string // the options that set limit and share
	mu      sync.Mutex
	used    int64
	keys    map[Key]*holder // the keys holding or waiting for room; none at zero
	ready   readyKeys       // the keys whose first waiting read fits their share
	seq     uint64          // of the last waiting read
	refused atomic.Uint64
	warned  atomic.Int64 // unix nanoseconds of the last warning
}

// holder is what the reads of one key hold and wait for.
type holder struct {
	key     Key
	used    int64
	waiters list.List // of *waiter, oldest first
	index   int       // in Pool.ready; -1 when not there
}

// waiter is a read waiting for n bytes; granted is closed once they are
// reserved for it.
type waiter struct {
	n       int64
	seq     uint64 // the order it came in
	granted chan struct{}
}

// head is k's oldest waiting read; k has one.
func (k *holder) head() *waiter { return k.waiters.Front().Value.(*waiter) }

// readyKeys is a heap of keys by the order their oldest waiting reads
// came in.
type readyKeys []*holder

func (h readyKeys) Len() int           { return len(h) }
func (h readyKeys) Less(i, j int) bool { return h[i].head().seq < h[j].head().seq }
func (h readyKeys) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *readyKeys) Push(x any) {
	k := x.(*holder)
	k.index = len(*h)
	*h = append(*h, k)
}
func (h *readyKeys) Pop() any {
	old := *h
	k := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	k.index = -1
	return k
}

// New returns a pool of o (nil: no bound).
func New(o *Options) *Pool {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Share <= 0 || c.Share > c.Limit {
		c.Share = c.Limit
	}
	return &Pool{limit: c.Limit, share: c.Share, wait: c.Wait, names: [2]string{c.LimitName, c.ShareName},
		logger: c.Logger, keys: map[Key]*holder{}}
}

// Reserve reserves n bytes for a read for who (at most the share, so that
// one read larger than the share still runs, alone) and returns what it
// reserved, to give back through Resize with the same who. Without a
// bound it reserves nothing.
func (p *Pool) Reserve(ctx context.Context, who Key, n int64) (int64, error) {
	if p.limit <= 0 {
		return 0, nil
	}
	n = min(max(n, 1), p.share)
	p.mu.Lock()
	k := p.keys[who]
	if k == nil {
		k = &holder{key: who, index: -1}
		p.keys[who] = k
	}
	if p.ready.Len() == 0 && k.waiters.Len() == 0 && p.used+n <= p.limit && k.used+n <= p.share {
		p.used += n
		k.used += n
		p.mu.Unlock()
		return n, nil
	}
	p.seq++
	w := &waiter{n: n, seq: p.seq, granted: make(chan struct{})}
	el := k.waiters.PushBack(w)
	p.placeLocked(k)
	p.grantLocked() // the line may hold only reads that do not fit
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
	overShare := false
	select {
	case <-w.granted: // granted while giving up: give it back
		p.used -= n
		k.used -= n
	default:
		ahead := k.used // what the key holds and its reads ahead of w wait for
		for e := k.waiters.Front(); e != el; e = e.Next() {
			ahead += e.Value.(*waiter).n
		}
		overShare = p.share < p.limit && ahead+n > p.share
		k.waiters.Remove(el)
	}
	p.placeLocked(k)
	p.grantLocked() // the next may fit now that this one is gone
	p.mu.Unlock()
	return 0, p.refuse(ctxErr, overShare)
}

// placeLocked puts k in the line of ready keys when its oldest waiting
// read fits its share, takes it out when not, and forgets k once it holds
// and waits for nothing. Call it with mu held whenever k's room or
// waiting reads change.
func (p *Pool) placeLocked(k *holder) {
	ready := k.waiters.Len() > 0 && k.used+k.head().n <= p.share
	switch {
	case ready && k.index < 0:
		heap.Push(&p.ready, k)
	case ready:
		heap.Fix(&p.ready, k.index) // its oldest read may have changed
	case k.index >= 0:
		heap.Remove(&p.ready, k.index)
	}
	if k.used == 0 && k.waiters.Len() == 0 {
		delete(p.keys, k.key)
	}
}

// grantLocked reserves room for the waiting reads that fit, oldest first
// among those within their key's share, and wakes them; it stops at the
// first that does not fit the pool. Call it with mu held.
func (p *Pool) grantLocked() {
	for p.ready.Len() > 0 {
		k := p.ready[0]
		w := k.head()
		if p.used+w.n > p.limit {
			return
		}
		p.used += w.n
		k.used += w.n
		k.waiters.Remove(k.waiters.Front())
		close(w.granted)
		p.placeLocked(k)
	}
}

// refuse counts a read refused for want of room, logs it at most once a
// minute, and returns its error: overShare when its key's reads held, or
// waited for, its share.
func (p *Pool) refuse(ctxErr error, overShare bool) error {
	n := p.refused.Add(1)
	full := p.names[0] // the setting that refused it
	if overShare {
		full = p.names[1]
	}
	if now := time.Now().UnixNano(); now-p.warned.Load() >= int64(time.Minute) {
		p.warned.Store(now)
		p.logger.Warn("read refused: the reads in flight hold "+full, "limit", p.limit, "share", p.share, "refused", n)
	}
	if ctxErr != nil {
		return pigeon.WrapError(pigeon.CodeRequestTimeout, ctxErr, "the request ended while waiting for room to read")
	}
	var err *pigeon.Error
	if overShare {
		err = pigeon.NewError(pigeon.CodeRateLimited,
			"this principal's reads in flight hold its share of the memory the server allows reads (%s); try again later", p.names[1])
	} else {
		err = pigeon.NewError(pigeon.CodeRateLimited,
			"the reads in flight hold all the memory the server allows them (%s); try again later", p.names[0])
	}
	err.Details = map[string]any{"retryAfterMs": int64(time.Second / time.Millisecond)} // Retry-After: 1 over HTTP
	return err
}

// Resize turns a reservation of held bytes for a read for who into one of
// n (0 gives it all back) and returns n. It may take the pool, or the
// share of who, past its bound: the read it accounts for has been made.
func (p *Pool) Resize(who Key, held, n int64) int64 {
	if p.limit <= 0 || held == n {
		return n
	}
	p.mu.Lock()
	p.used += n - held
	if k := p.keys[who]; k != nil { // nil only for a key that never reserved
		k.used += n - held
		p.placeLocked(k)
	}
	// Room given back may let the first in line through; a read grown past
	// its key's share takes that key's reads out of the line, which may
	// let the next through.
	p.grantLocked()
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

// ForEngine returns the pool of a server of e whose options
// MaxReadBytesInFlight and MaxReadBytesPerPrincipal are limit and share
// (see ShareOf, with ReadReserve(e) for the reservation; nil e: none), and
// whose reads wait up to wait for room.
func ForEngine(e *pigeon.Engine, limit, share int64, wait time.Duration, logger *slog.Logger) *Pool {
	var reserve int64
	if e != nil {
		reserve = ReadReserve(e)
	}
	return New(&Options{Limit: limit, Share: ShareOf(limit, share, reserve), Wait: wait,
		LimitName: "MaxReadBytesInFlight", ShareName: "MaxReadBytesPerPrincipal", Logger: logger})
}

// ReadReserve is what a read of e reserves before it reads: twice the
// engine's MaxReadBytes (the messages and their encoding) and a little for
// envelopes.
func ReadReserve(e *pigeon.Engine) int64 { return 2*int64(e.MaxReadBytes()) + 1<<20 }
