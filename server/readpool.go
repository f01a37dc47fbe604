package server

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"pigeon"
)

// DefaultMaxReadBytesInFlight is Options.MaxReadBytesInFlight when it is 0.
const DefaultMaxReadBytesInFlight = 256 << 20

// readWait bounds how long a read waits for room in the pool before it is
// refused. A variable so that tests need not wait that long.
var readWait = 2 * time.Second

// readPool bounds the memory the server's reads (pull receive, replay,
// the quarantine's and the audit log's pages) hold at once, from the store read until their answer is written
// (Options.MaxReadBytesInFlight). A read reserves its most before it reads
// (twice the engine's MaxReadBytes: the messages and their encoded answer)
// and keeps, once it has read, about what it holds; the rest goes back to
// the pool at once, and the whole when the answer is written. So a client
// that asks for large answers and reads them slowly, keeping the server's
// writes waiting up to its WriteTimeout, pins at most the pool, not a
// multiple of MaxReadBytes per connection. A read that finds no room waits
// for it, within readWait and its request's context, and is then refused
// RATE_LIMITED before anything is read, leased or settled.
//
// Its methods are safe for concurrent use.
type readPool struct {
	limit   int64 // <= 0: no bound
	logger  *slog.Logger
	mu      sync.Mutex
	used    int64
	room    chan struct{} // closed, and replaced, whenever used falls
	refused atomic.Uint64
	warned  atomic.Int64 // unix nanoseconds of the last warning
}

func newReadPool(limit int64, logger *slog.Logger) *readPool {
	return &readPool{limit: limit, logger: logger, room: make(chan struct{})}
}

// acquire reserves n bytes (at most the whole pool, so that one read
// larger than the pool still runs, alone) and returns what it reserved,
// to give back through resize. Without a bound it reserves nothing.
func (p *readPool) acquire(ctx context.Context, n int64) (int64, error) {
	if p.limit <= 0 {
		return 0, nil
	}
	n = min(max(n, 1), p.limit)
	var timer *time.Timer
	for {
		p.mu.Lock()
		if p.used+n <= p.limit {
			p.used += n
			p.mu.Unlock()
			if timer != nil {
				timer.Stop()
			}
			return n, nil
		}
		room := p.room
		p.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(readWait)
			defer timer.Stop()
		}
		select {
		case <-room:
		case <-ctx.Done():
			return 0, p.refuse(ctx.Err())
		case <-timer.C:
			return 0, p.refuse(nil)
		}
	}
}

// refuse counts a read refused for want of room, logs it at most once a
// minute, and returns its error: the context's when it ended, else
// RATE_LIMITED.
func (p *readPool) refuse(ctxErr error) error {
	n := p.refused.Add(1)
	if now := time.Now().UnixNano(); now-p.warned.Load() >= int64(time.Minute) {
		p.warned.Store(now)
		p.logger.Warn("read refused: the reads in flight hold MaxReadBytesInFlight", "maxReadBytesInFlight", p.limit, "refused", n)
	}
	if ctxErr != nil {
		return pigeon.WrapError(pigeon.CodeRequestTimeout, ctxErr, "the request ended while waiting for room to read")
	}
	return pigeon.NewError(pigeon.CodeRateLimited,
		"the server's reads in flight hold all the memory it allows them (MaxReadBytesInFlight); try again later")
}

// resize turns a reservation of held bytes into one of n (0 gives it all
// back) and returns n. It may take the pool past its bound: the read it
// accounts for has been made.
func (p *readPool) resize(held, n int64) int64 {
	if p.limit <= 0 || held == n {
		return n
	}
	p.mu.Lock()
	p.used += n - held
	if n < held {
		close(p.room)
		p.room = make(chan struct{})
	}
	p.mu.Unlock()
	return n
}

// inUse is the bytes reserved now.
func (p *readPool) inUse() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.used
}

// readCost is about the memory an answer of msgs holds until it is
// written: each message decoded and encoded, and their envelopes.
func readCost(msgs []*pigeon.Message) int64 {
	var n int64
	for _, m := range msgs {
		n += 2*int64(len(m.Data)) + 1024
	}
	return n
}

// quarantineCost is readCost for quarantine records.
func quarantineCost(recs []pigeon.QuarantineRecord) int64 {
	var n int64
	for _, r := range recs {
		n += 2*int64(len(r.Body)) + 1024
	}
	return n
}

// auditCost is readCost for audit records: each field is at most 512
// bytes (pigeon.AuditRecord), most far less.
func auditCost(recs []pigeon.AuditRecord) int64 {
	var n int64
	for i := range recs {
		r := &recs[i]
		n += 2*int64(len(r.Subject)+len(r.Principal)+len(r.ContractID)+len(r.PolicyID)+len(r.SchemaID)+
			len(r.MessageID)+len(r.Ref)+len(r.Seqs)+len(r.Digest)+len(r.Gate)+len(r.Hash)+len(r.PrevHash)) + 512
	}
	return n
}

// reserveRead reserves room for a read of the engine's largest answer
// (twice its MaxReadBytes, and a little for envelopes) before the read; the
// route's answer gives it back once written.
func (rq *request) reserveRead() error {
	n, err := rq.s.reads.acquire(rq.ctx, 2*int64(rq.s.e.MaxReadBytes())+1<<20)
	rq.held = n
	return err
}

// keepRead keeps, of the read's reservation, what msgs cost.
func (rq *request) keepRead(msgs []*pigeon.Message) {
	rq.held = rq.s.reads.resize(rq.held, readCost(msgs))
}
