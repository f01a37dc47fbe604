package identity

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"pigeon"
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
	// MaxFailures is how many failures (failed TLS handshakes, for
	// ServerTLS) one source may have in Window before the rest of the
	// window is refused outright (default 20 in 1 minute).
	MaxFailures int
	Window      time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Limiter counts failures per source and refuses a source that had too
// many in a window, before any verification work is spent on it. A source
// is a remote IPv4 address, or a remote IPv6 /64 (a host given a /64 could
// otherwise rotate through its addresses), as the engine's lockout and the
// server's per-IP connection cap count them; an address that is not IP is
// counted whole, without its port. It remembers a bounded number of
// sources. It is safe for concurrent use.
//
// Its use is failed TLS handshakes (TLSOptions.Limiter), which the engine
// never sees. Refused credentials are the engine's to count
// (pigeon.Options.AuthFailureLimit: one count per refusal, audited, with
// Retry-After); a Limiter given to a Chain (deprecated) counts them a
// second time.
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

// source is the key remote counts under: its pigeon.Source, or, for an
// address that is not IP, the address without its port (whole when it
// does not parse).
func source(remote string) string {
	if k := pigeon.SourceOf(remote); k.IsValid() {
		return k.String()
	}
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
	h := source(remote)
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

// Fail records a failure from remote; handshake says it was a TLS
// handshake.
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
	h := source(remote)
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

// evict forgets the windows that have ended and, while more than half
// the addresses remain (a flood of distinct addresses must not grow
// memory without bound), sources that are not refused, and only then
// sources that are: a flood of single failures from elsewhere must not
// let a locked-out source guess again.
func (l *Limiter) evict(now time.Time) {
	for h, w := range l.addrs {
		if now.Sub(w.start) >= l.opts.Window {
			delete(l.addrs, h)
		}
	}
	for _, refused := range [...]bool{false, true} {
		for h, w := range l.addrs {
			if len(l.addrs) < defaultMaxAddresses/2 {
				return
			}
			if (w.n >= l.opts.MaxFailures) == refused {
				delete(l.addrs, h)
			}
		}
	}
}

// LimiterStats are a Limiter's counters since it was made.
type LimiterStats struct {
	// Failures counts failures, HandshakeFailures those of them that were
	// TLS handshakes, Limited the attempts refused because their source
	// had failed too often.
	Failures, HandshakeFailures, Limited int64
}

// Stats returns the counters.
func (l *Limiter) Stats() LimiterStats {
	return LimiterStats{Failures: l.failures.Load(), HandshakeFailures: l.handshakeFailures.Load(), Limited: l.limited.Load()}
}
