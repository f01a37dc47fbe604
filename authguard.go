package pigeon

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Options.AuthFailureLimit and Options.AuthFailureWindow.
const (
	DefaultAuthFailureLimit  = 20
	DefaultAuthFailureWindow = time.Minute
)

// maxAuthSources bounds the sources an authGuard remembers, and, apart,
// the IPv6 sites it remembers; the one whose window began first is
// forgotten to make room.
const maxAuthSources = 16384

// authPrefixFailuresPerSource is a /48's limit in per-source limits by
// default (SiteLimit.Factor).
const authPrefixFailuresPerSource = DefaultSiteFactor

// authGuard counts failed authentications per Source (an IPv4 address,
// or an IPv6 /64, which a host can rotate through) and, once a source
// reaches the limit within the window, refuses its attempts for a window
// from then, before any credential is checked: a correct guess
// made during the lockout does not succeed. A success neither resets nor
// lowers a source's count: a guesser holding one valid credential of its
// own could otherwise slip it in between guesses and guess for ever. The
// price is that a client sharing an address with a guesser (a NAT) waits
// out the lockout with it. Attempts checked at once may each be let in
// before the first of them fails, so the limit holds within the attempts
// a source has in flight. It is safe for concurrent use.
//
// The /64s of one IPv6 site (a /48 by default: Options.AuthFailureSite)
// are also counted together, against a multiple of the limit (16 times:
// 320 failures a minute by default), and once the site reaches it every
// address of it is locked out for a window: a /48 is the most one site
// is given, and its holder may speak from any of its 65,536 /64s, each a
// source with a fresh count; without it one holder had 65,536 × 20 = 1.3
// million guesses a minute, with it 320. The price: a site holding a /56
// (a home's usual assignment) inside a provider's /48 reaches it after 16
// of its /64s have reached theirs, and the other sites of that /48 wait
// out the window with it. IPv4 sources, and IPv6 addresses that carry an
// IPv4 one (see Source: their /48s hold many IPv4 clients), are not
// counted together. The sites are remembered in a table of their own,
// bounded as the sources' is.
type authGuard struct {
	window time.Duration
	limit  int // <= 0: no lockout at all
	// site is how sources count together; prefixLimit is a site's limit
	// (<= 0: none).
	site        SiteLimit
	prefixLimit int

	// until is the latest lockedUntil any source or /48 was given (unix
	// nanoseconds; 0: none): at or after it nothing is locked out, and
	// locked answers without taking mu. Written under mu, read without.
	until atomic.Int64

	mu          sync.Mutex
	sources     map[Source]*list.Element // of *authFailures
	order       list.List                // of sources, oldest window first
	prefixes    map[Source]*list.Element // of *authFailures, per site
	prefixOrder list.List                // of prefixes, oldest window first
}

// authFailures are one key's failures since start.
type authFailures struct {
	src         Source
	start       time.Time // when the window's first failure came
	n           int       // failures in the window
	lockedUntil time.Time // zero unless the key reached the limit
}

// newAuthGuard is newAuthGuardSite with the default SiteLimit: /48s, at
// 16 × limit.
func newAuthGuard(limit int, window time.Duration) *authGuard {
	return newAuthGuardSite(limit, SiteLimit{}, window)
}

// newAuthGuardSite returns a guard that locks a source out after limit
// failures in window (<= 0: never), and an IPv6 site of it after
// site.Limit(limit) (sites off, or limit <= 0: never). site must be
// valid (SiteLimit.Check).
func newAuthGuardSite(limit int, site SiteLimit, window time.Duration) *authGuard {
	return &authGuard{window: window, limit: limit, site: site, prefixLimit: site.Limit(limit),
		sources: map[Source]*list.Element{}, prefixes: map[Source]*list.Element{}}
}

// prefixOf is the key src's site counts under, when src is an IPv6
// source and sites are counted. It cannot be a Source's key: its prefix
// length is not 64.
func (g *authGuard) prefixOf(src Source) (Source, bool) {
	if g.prefixLimit <= 0 {
		return Source{}, false
	}
	return g.site.Of(src)
}

// locked reports whether src is locked out at now, by its own count or
// its site's, and for how much longer. While nothing is locked out it
// costs one atomic load; otherwise up to two map lookups under the
// guard's mutex.
func (g *authGuard) locked(src Source, now time.Time) (time.Duration, bool) {
	left, _ := g.lockedBy(src, now)
	return left, left > 0
}

// lockedBy is locked, with src's site when the site's own count locks src
// out at now (src's count may lock it out too; the zero Source when the
// site's does not).
func (g *authGuard) lockedBy(src Source, now time.Time) (time.Duration, Source) {
	if g.limit <= 0 || !src.IsValid() || now.UnixNano() >= g.until.Load() {
		return 0, Source{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	left := lockedLeft(g.sources, src, now)
	var site Source
	if p, ok := g.prefixOf(src); ok {
		if l := lockedLeft(g.prefixes, p, now); l > 0 {
			left, site = max(left, l), p
		}
	}
	return left, site
}

// lockedLeft is how much longer key of keys is locked out at now (0: it
// is not).
func lockedLeft(keys map[Source]*list.Element, key Source, now time.Time) time.Duration {
	el := keys[key]
	if el == nil {
		return 0
	}
	return max(el.Value.(*authFailures).lockedUntil.Sub(now), 0)
}

// failed counts a failed authentication from src at now, and against its
// site.
func (g *authGuard) failed(src Source, now time.Time) {
	if g.limit <= 0 || !src.IsValid() {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.count(g.sources, &g.order, g.limit, src, now)
	if p, ok := g.prefixOf(src); ok {
		g.count(g.prefixes, &g.prefixOrder, g.prefixLimit, p, now)
	}
}

// count counts a failure of key at now in keys, whose order is order and
// whose limit is limit; it forgets the oldest window beyond maxAuthSources
// keys.
func (g *authGuard) count(keys map[Source]*list.Element, order *list.List, limit int, key Source, now time.Time) {
	el := keys[key]
	if el == nil {
		if len(keys) >= maxAuthSources {
			oldest := order.Front()
			delete(keys, oldest.Value.(*authFailures).src)
			order.Remove(oldest)
		}
		el = order.PushBack(&authFailures{src: key, start: now})
		keys[key] = el
	}
	f := el.Value.(*authFailures)
	if f.lockedUntil.After(now) {
		return // an attempt let in just before the lockout began
	}
	if !f.lockedUntil.IsZero() || now.Sub(f.start) >= g.window {
		*f = authFailures{src: key, start: now}
		order.MoveToBack(el)
	}
	f.n++
	if f.n >= limit {
		f.lockedUntil = now.Add(g.window)
		if u := f.lockedUntil.UnixNano(); u > g.until.Load() {
			g.until.Store(u)
		}
	}
}

// size is how many sources are remembered.
func (g *authGuard) size() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.sources)
}

// prefixSize is how many IPv6 sites are remembered.
func (g *authGuard) prefixSize() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.prefixes)
}

// LockedOut reports whether src is locked out now for refused credentials
// (Options.AuthFailureLimit), and for how much longer: the answer
// AuthenticateCredential would give a credential from src before looking
// at it. An IPv6 source is also locked out while its site is (a /48 by
// default: 16 × AuthFailureLimit refused within the window from its /64s
// together; see Options.AuthFailureSite). It counts nothing and audits nothing, so a
// server may ask it for every connection it accepts, before any TLS
// handshake. The zero Source, and every source when the lockout is off,
// is never locked out.
//
// It is safe for concurrent use and cheap: while no source is locked out
// it is one atomic load; otherwise up to two map lookups under the mutex
// that counting a refusal takes. A source locked out by a refusal counted
// at the same time may be reported either way.
func (e *Engine) LockedOut(src Source) (time.Duration, bool) {
	return e.authGuard.locked(src, e.now())
}
