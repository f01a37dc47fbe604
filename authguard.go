package pigeon

import (
	"container/list"
	"net/netip"
	"sync"
	"time"
)

// Defaults of Options.AuthFailureLimit and Options.AuthFailureWindow.
const (
	DefaultAuthFailureLimit  = 20
	DefaultAuthFailureWindow = time.Minute
)

// maxAuthSources bounds the source addresses an authGuard remembers; the
// one whose window began first is forgotten to make room.
const maxAuthSources = 16384

// authGuard counts failed authentications per source IP address and, once
// a source reaches the limit within the window, refuses its attempts for
// a window from then, before any credential is checked: a correct guess
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

	mu      sync.Mutex
	sources map[netip.Addr]*list.Element // of *authFailures
	order   list.List                    // oldest window first
}

// authFailures are one source's failures since start.
type authFailures struct {
	ip          netip.Addr
	start       time.Time // when the window's first failure came
	n           int       // failures in the window
	lockedUntil time.Time // zero unless the source reached the limit
}

func newAuthGuard(limit int, window time.Duration) *authGuard {
	return &authGuard{limit: limit, window: window, sources: map[netip.Addr]*list.Element{}}
}

// sourceIP is the IP address of a remote address (host:port, or a bare
// host), IPv4-mapped IPv6 unmapped, as the server's per-address
// connection cap reads it; the zero Addr when it names none (in process,
// a Unix socket).
func sourceIP(remote string) netip.Addr {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return ap.Addr().Unmap()
	}
	if a, err := netip.ParseAddr(remote); err == nil {
		return a.Unmap()
	}
	return netip.Addr{}
}

// locked reports whether ip is locked out at now, and for how much longer.
func (g *authGuard) locked(ip netip.Addr, now time.Time) (time.Duration, bool) {
	if g.limit <= 0 || !ip.IsValid() {
		return 0, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	el := g.sources[ip]
	if el == nil {
		return 0, false
	}
	f := el.Value.(*authFailures)
	if left := f.lockedUntil.Sub(now); left > 0 {
		return left, true
	}
	return 0, false
}

// failed counts a failed authentication from ip at now.
func (g *authGuard) failed(ip netip.Addr, now time.Time) {
	if g.limit <= 0 || !ip.IsValid() {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	el := g.sources[ip]
	if el == nil {
		if len(g.sources) >= maxAuthSources {
			oldest := g.order.Front()
			delete(g.sources, oldest.Value.(*authFailures).ip)
			g.order.Remove(oldest)
		}
		el = g.order.PushBack(&authFailures{ip: ip, start: now})
		g.sources[ip] = el
	}
	f := el.Value.(*authFailures)
	if f.lockedUntil.After(now) {
		return // an attempt let in just before the lockout began
	}
	if !f.lockedUntil.IsZero() || now.Sub(f.start) >= g.window {
		*f = authFailures{ip: ip, start: now}
		g.order.MoveToBack(el)
	}
	f.n++
	if f.n >= g.limit {
		f.lockedUntil = now.Add(g.window)
	}
}

// size is how many sources are remembered.
func (g *authGuard) size() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.sources)
}
