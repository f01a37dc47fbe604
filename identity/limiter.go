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
	// MaxPrefixFailures is how many failures the /64s of one IPv6 site
	// (Site: a /48 by default) may have in Window, all together, before
	// the rest of the window is refused to the whole site (default
	// Site.Limit(MaxFailures), 16 × MaxFailures: 320 in 1 minute;
	// negative: no such limit). A /48 is the most a single site
	// is given, and its holder may speak from any of its 65,536 /64s,
	// each a source of its own: without this limit it had 65,536 ×
	// MaxFailures tries a window (1.3 million a minute), with it 320.
	// The price: one holder of a /56 (a home's usual assignment) inside
	// a provider's /48 reaches the limit after 16 of its /64s have, and
	// the other sites of that /48 wait out the window with it; honest
	// clients of a /48 reach it only when 320 of their handshakes fail
	// within a minute. IPv4 sources, and IPv6 addresses that stand for
	// an IPv4 one (see pigeon.Source), have no such limit.
	MaxPrefixFailures int
	// Site is the prefix length of a site and its default limit in
	// MaxFailures (default: /48s, 16 × MaxFailures; Site.Bits negative:
	// sites are not counted, whatever MaxPrefixFailures says). NewLimiter
	// panics when it is not valid (pigeon.SiteLimit.Check): check it
	// first.
	Site pigeon.SiteLimit
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Limiter counts failures per source and refuses a source that had too
// many in a window, before any verification work is spent on it. A source
// is a remote IPv4 address, or a remote IPv6 /64 (a host given a /64 could
// otherwise rotate through its addresses), as the engine's lockout and the
// server's per-IP connection cap count them; an address that is not IP is
// counted whole, without its port. The /64s of one IPv6 site (a /48 by
// default: LimiterOptions.Site) are also counted together, against a
// higher limit (LimiterOptions.MaxPrefixFailures): one holder of a /48
// would otherwise have a fresh count in each of its 65,536 /64s. It remembers a bounded
// number of sources. It is safe for concurrent use.
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
	limit  int  // the failures that close the window
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
	if err := o.Site.Check(); err != nil {
		panic("identity: LimiterOptions.Site: " + err.Error())
	}
	if o.Site.Bits == 0 {
		o.Site.Bits = pigeon.DefaultSiteBits
	}
	if o.Site.Factor == 0 {
		o.Site.Factor = pigeon.DefaultSiteFactor
	}
	switch {
	case o.Site.Off():
		o.MaxPrefixFailures = -1
	case o.MaxPrefixFailures == 0:
		o.MaxPrefixFailures = o.Site.Limit(o.MaxFailures)
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

// prefix is the key the site of remote counts under
// (LimiterOptions.MaxPrefixFailures), or "" when remote is not an IPv6
// source or the limit is off. It cannot be a key of source: its prefix
// length is not 64.
func (l *Limiter) prefix(remote string) string {
	if l.opts.MaxPrefixFailures < 0 {
		return ""
	}
	site, ok := l.opts.Site.Of(pigeon.SourceOf(remote))
	if !ok {
		return ""
	}
	return site.String()
}

// Allow reports whether remote may try to authenticate now. An empty
// address (in process) is always allowed. A refusal is counted.
func (l *Limiter) Allow(remote string) bool {
	ok, _, _ := l.allow(remote)
	return ok
}

// allow is Allow, whether this is the window's first refusal (the one
// worth a log line: a source over its limit is not logged on every try),
// and the source refused: remote's, or its site.
func (l *Limiter) allow(remote string) (ok, first bool, by string) {
	if l == nil || remote == "" {
		return true, false, ""
	}
	keys, n := [2]string{source(remote), l.prefix(remote)}, 1
	if keys[1] != "" {
		n = 2
	}
	now := l.opts.Now()
	ok = true
	l.mu.Lock()
	for _, k := range keys[:n] {
		if w := l.addrs[k]; w != nil && now.Sub(w.start) < l.opts.Window && w.n >= w.limit {
			ok, first, by = false, !w.warned, k
			w.warned = true
			break
		}
	}
	l.mu.Unlock()
	if !ok {
		l.limited.Add(1)
	}
	return ok, first, by
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
	now := l.opts.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count(source(remote), l.opts.MaxFailures, now)
	if k := l.prefix(remote); k != "" {
		l.count(k, l.opts.MaxPrefixFailures, now)
	}
}

// count records a failure of source h, whose limit is limit, at now.
func (l *Limiter) count(h string, limit int, now time.Time) {
	w := l.addrs[h]
	if w == nil || now.Sub(w.start) >= l.opts.Window {
		if w == nil && len(l.addrs) >= defaultMaxAddresses {
			l.evict(now)
		}
		l.addrs[h] = &window{start: now, n: 1, limit: limit}
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
			if (w.n >= w.limit) == refused {
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
