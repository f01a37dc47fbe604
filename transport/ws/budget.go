package ws

import (
	"sync"
	"sync/atomic"
)

// budget bounds the bytes of frames queued for writing: each connection
// has one, and so has the server, across its connections. A frame takes
// its bytes before it is queued and gives them back once written. One
// frame is always let through when nothing else is queued, however large,
// so that a frame bigger than the bound still goes out; and a connection
// with nothing queued may always queue one frame whatever the server's
// use, so that connections that stopped reading cannot starve the others
// (the server's use stays below its bound plus one frame per connection).
type budget struct {
	limit int64
	peak  *atomic.Int64 // highest use seen, when tracked

	mu    sync.Mutex
	used  int64
	freed chan struct{} // closed when bytes come back, made when someone waits
}

// take takes n bytes when they fit, or whatever the use when force is
// set; otherwise it returns a channel that is closed when bytes come back.
// first reports whether nothing was taken before.
func (b *budget) take(n int64, force bool) (ok, first bool, freed <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !force && b.used > 0 && b.used+n > b.limit {
		if b.freed == nil {
			b.freed = make(chan struct{})
		}
		return false, false, b.freed
	}
	first = b.used == 0
	b.used += n
	if b.peak != nil {
		for p := b.peak.Load(); b.used > p && !b.peak.CompareAndSwap(p, b.used); p = b.peak.Load() {
		}
	}
	return true, first, nil
}

// emptied returns a channel that is closed when bytes come back, closed
// already when nothing is taken (the next take is a first).
func (b *budget) emptied() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used == 0 {
		return closedChan
	}
	if b.freed == nil {
		b.freed = make(chan struct{})
	}
	return b.freed
}

// closedChan is a channel that is closed.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// give returns n bytes taken before.
func (b *budget) give(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	ch := b.freed
	b.freed = nil
	b.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// inUse is the bytes taken and not given back.
func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
