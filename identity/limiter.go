package identity

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of LimiterOptions.
const (
	DefaultMaxFailures   = 20
	DefaultFailureWindow = time.Minute
	defaultMaxAddresses  = 65536
)

// LimiterOptions configure a Limiter. A nil *LimiterOptions means the
// defaults; NewLimiter copies the value.
type LimiterOptions struct {
	// MaxFailures is how many failed authentications (refused tokens,
	// refused certificates, failed TLS handshakes) one remote address may
	// have in Window before the rest of the window is refused outright
	// (default 20 in 1 minute).
	MaxFailures int
	Window      time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Limiter counts failed authentications per remote address (the host,
// without the port) and refuses an address that had too many in a window,
// before any verification work is spent on it. It remembers a bounded
// number of addresses. It is safe for concurrent use.
type Limiter struct {
	opts LimiterOptions

	mu    sync.Mutex
	addrs map[string]*window

	failures, handshakeFailures, limited atomic.Int64
}

type window struct {
	start  time.Time
	n      int
	warned bool // a refusal of this window was reported
}

// NewLimiter returns a Limiter.
func NewLimiter(opts *LimiterOptions) *Limiter {
	var o LimiterOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxFailures <= 0 {
		o.MaxFailures = DefaultMaxFailures
	}
	if o.Window <= 0 {
		o.Window = DefaultFailureWindow
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Limiter{opts: o, addrs: map[string]*window{}}
}

// host is the address without its port; an address that does not parse is
// kept whole.
func host(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}

// Allow reports whether remote may try to authenticate now. An empty
// address (in process) is always allowed. A refusal is counted.
func (l *Limiter) Allow(remote string) bool {
	ok, _ := l.allow(remote)
	return ok
}

// allow is Allow, and whether this is the window's first refusal (the one
// worth a log line: an address over its limit is not logged on every try).
func (l *Limiter) allow(remote string) (ok, first bool) {
	if l == nil || remote == "" {
		return true, false
	}
	h := host(remote)
	now := l.opts.Now()
	l.mu.Lock()
	w := l.addrs[h]
	ok = w == nil || now.Sub(w.start) >= l.opts.Window || w.n < l.opts.MaxFailures
	if !ok {
		first = !w.warned
		w.warned = true
	}
	l.mu.Unlock()
	if !ok {
		l.limited.Add(1)
	}
	return ok, first
}

// Fail records a failed authentication from remote; handshake says it was
// a TLS handshake.
func (l *Limiter) Fail(remote string, handshake bool) {
	if l == nil {
		return
	}
	l.failures.Add(1)
	if handshake {
		l.handshakeFailures.Add(1)
	}
	if remote == "" {
		return
	}
	h := host(remote)
	now := l.opts.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.addrs[h]
	if w == nil || now.Sub(w.start) >= l.opts.Window {
		if w == nil && len(l.addrs) >= defaultMaxAddresses {
			l.evict(now)
		}
		l.addrs[h] = &window{start: now, n: 1}
		return
	}
	w.n++
}

// evict forgets the windows that have ended, or, when none has, an
// arbitrary half of the addresses (a flood of distinct addresses must not
// grow memory without bound).
func (l *Limiter) evict(now time.Time) {
	for h, w := range l.addrs {
		if now.Sub(w.start) >= l.opts.Window {
			delete(l.addrs, h)
		}
	}
	for h := range l.addrs {
		if len(l.addrs) < defaultMaxAddresses/2 {
			break
		}
		delete(l.addrs, h)
	}
}

// LimiterStats are a Limiter's counters since it was made.
type LimiterStats struct {
	// Failures counts failed authentications, HandshakeFailures those of
	// them that were TLS handshakes, Limited the attempts refused because
	// their address had failed too often.
	Failures, HandshakeFailures, Limited int64
}

// Stats returns the counters.
func (l *Limiter) Stats() LimiterStats {
	return LimiterStats{Failures: l.failures.Load(), HandshakeFailures: l.handshakeFailures.Load(), Limited: l.limited.Load()}
}
