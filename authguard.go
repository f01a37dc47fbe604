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

// maxAuthSources bounds the sources an authGuard remembers; the one whose
// window began first is forgotten to make room.
const maxAuthSources = 16384

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
type authGuard struct {
	limit  int // <= 0: no limit
	window time.Duration

	// until is the latest lockedUntil any source was given (unix
	// nanoseconds; 0: none): at or after it no source is locked out, and
	// locked answers without taking mu. Written under mu, read without.
	until atomic.Int64

	mu      sync.Mutex
	sources map[Source]*list.Element // of *authFailures
	order   list.List                // oldest window first
}

// authFailures are one source's failures since start.
type authFailures struct {
	src         Source
	start       time.Time // when the window's first failure came
	n           int       // failures in the window
	lockedUntil time.Time // zero unless the source reached the limit
}

func newAuthGuard(limit int, window time.Duration) *authGuard {
	return &authGuard{limit: limit, window: window, sources: map[Source]*list.Element{}}
}

// locked reports whether src is locked out at now, and for how much longer.
// While no source is locked out it costs one atomic load; otherwise a map
// lookup under the guard's mutex.
func (g *authGuard) locked(src Source, now time.Time) (time.Duration, bool) {
	if g.limit <= 0 || !src.IsValid() || now.UnixNano() >= g.until.Load() {
		return 0, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	el := g.sources[src]
	if el == nil {
		return 0, false
	}
	f := el.Value.(*authFailures)
	if left := f.lockedUntil.Sub(now); left > 0 {
		return left, true
	}
	return 0, false
}

// failed counts a failed authentication from src at now.
func (g *authGuard) failed(src Source, now time.Time) {
	if g.limit <= 0 || !src.IsValid() {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	el := g.sources[src]
	if el == nil {
		if len(g.sources) >= maxAuthSources {
			oldest := g.order.Front()
			delete(g.sources, oldest.Value.(*authFailures).src)
			g.order.Remove(oldest)
		}
		el = g.order.PushBack(&authFailures{src: src, start: now})
		g.sources[src] = el
	}
	f := el.Value.(*authFailures)
	if f.lockedUntil.After(now) {
		return // an attempt let in just before the lockout began
	}
	if !f.lockedUntil.IsZero() || now.Sub(f.start) >= g.window {
		*f = authFailures{src: src, start: now}
		g.order.MoveToBack(el)
	}
	f.n++
	if f.n >= g.limit {
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

// LockedOut reports whether src is locked out now for refused credentials
// (Options.AuthFailureLimit), and for how much longer: the answer
// AuthenticateCredential would give a credential from src before looking
// at it. It counts nothing and audits nothing, so a server may ask it for
// every connection it accepts, before any TLS handshake. The zero Source,
// and every source when the lockout is off, is never locked out.
//
// It is safe for concurrent use and cheap: while no source is locked out
// it is one atomic load; otherwise one map lookup under the mutex that
// counting a refusal takes. A source locked out by a refusal counted at
// the same time may be reported either way.
func (e *Engine) LockedOut(src Source) (time.Duration, bool) {
	return e.authGuard.locked(src, e.now())
}
