package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"pigeon"
	"pigeon/internal/wire"
)

// connLimit is what a Server checks of a connection as it accepts it,
// before any TLS handshake or HTTP parsing: that its source is not locked
// out for refused credentials (pigeon.Engine.LockedOut), and that it fits
// the caps on the connections held open at once, in all
// (Options.MaxConnections) and per source (Options.MaxConnectionsPerIP:
// a pigeon.Source: an IPv4 address, or an IPv6 /64), and, when the
// per-source cap is set, per IPv6 site (perPrefix; Options.ConnectionSite,
// a /48 by default). A TCP peer that is a
// trusted proxy (Options.TrustedProxies) is neither: its clients are known
// only from X-Forwarded-For, in its requests, so it is never cut off for a
// lockout and counts in all only. Every listener of the Server shares it.
// Its methods are safe for concurrent use.
type connLimit struct {
	max, perIP int // <= 0: no cap
	// perPrefix caps the connections of the /64s of one IPv6 site (site)
	// together (<= 0: no cap): by default, of each /48, 16 × perIP; none
	// without perIP or with sites off. A /48 is
	// the most one site is given, and its holder may dial from any of its
	// 65,536 /64s, each a source with places of its own: without it one
	// holder could take 65,536 × perIP places, every place max allows,
	// and lock every other client out; with it 16 × perIP. The price: a
	// site holding a /56 (a home's usual assignment) inside a provider's
	// /48 shares the /48's places with the other sites of it, as hosts
	// sharing a /64 share a source's. IPv4 sources, and IPv6 addresses
	// that carry an IPv4 one (see pigeon.Source: their /48s hold many
	// IPv4 clients), are not counted together. A trusted proxy is exempt,
	// as from perIP.
	perPrefix int
	site      pigeon.SiteLimit
	tls       bool
	logger    *slog.Logger
	proxies   trustedProxies
	// lockedOut reports whether a source is locked out now
	// (pigeon.Engine.LockedOut); nil: no source ever is.
	lockedOut func(pigeon.Source) (time.Duration, bool)

	mu   sync.Mutex
	open int
	byIP map[pigeon.Source]int
	// byPrefix counts the connections of each IPv6 site (perPrefix); as
	// in byIP, a key is kept only while a connection of it is open.
	byPrefix map[netip.Prefix]int

	refused  atomic.Uint64
	lastWarn atomic.Int64  // unix nanoseconds of the last warning logged
	answers  chan struct{} // tokens of the goroutines that answer refused connections
	answer   []byte        // what a refused plain-HTTP connection reads

	// locked counts the connections refused for a lockout; lastLocked is
	// when one was last logged (unix nanoseconds).
	locked     atomic.Uint64
	lastLocked atomic.Int64
}

// refusalAnswerers bounds the refused connections answered at once; beyond
// it a refused connection is closed without an answer, so a flood costs
// no more than the accepts.
const refusalAnswerers = 32

// refusalWait bounds how long answering one refused connection may take.
const refusalWait = time.Second

// newConnLimit is newConnLimitSite with the default pigeon.SiteLimit:
// each IPv6 /48 holds 16 × perIP.
func newConnLimit(max, perIP int, tls bool, logger *slog.Logger, proxies trustedProxies,
	lockedOut func(pigeon.Source) (time.Duration, bool)) *connLimit {
	return newConnLimitSite(max, perIP, pigeon.SiteLimit{}, tls, logger, proxies, lockedOut)
}

// newConnLimitSite returns the limit of max connections in all, perIP
// per source, and site.Limit(perIP) per IPv6 site (site must be valid:
// pigeon.SiteLimit.Check).
func newConnLimitSite(max, perIP int, site pigeon.SiteLimit, tls bool, logger *slog.Logger, proxies trustedProxies,
	lockedOut func(pigeon.Source) (time.Duration, bool)) *connLimit {
	l := &connLimit{max: max, perIP: perIP, site: site, perPrefix: site.Limit(perIP), tls: tls, logger: logger, proxies: proxies, lockedOut: lockedOut,
		byIP: map[pigeon.Source]int{}, byPrefix: map[netip.Prefix]int{}, answers: make(chan struct{}, refusalAnswerers)}
	l.answer = refusalResponse(pigeon.NewError(pigeon.CodeRateLimited, "the server holds the most connections it allows; try again later"))
	return l
}

// refusalResponse is a whole HTTP/1.1 response carrying err as the API's
// refusals do (wire.WriteHTTPError), closing the connection; Retry-After
// is 1 unless err says when (details.retryAfterMs).
func refusalResponse(err error) []byte {
	rec := &recordedResponse{header: http.Header{}}
	wire.WriteHTTPError(rec, err)
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", rec.status, http.StatusText(rec.status))
	rec.header.Set("Connection", "close")
	if rec.header.Get("Retry-After") == "" {
		rec.header.Set("Retry-After", "1")
	}
	rec.header.Set("Content-Length", strconv.Itoa(rec.body.Len()))
	_ = rec.header.Write(&b)
	b.WriteString("\r\n")
	b.Write(rec.body.Bytes())
	return b.Bytes()
}

// recordedResponse is the http.ResponseWriter refusalResponse renders
// into.
type recordedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recordedResponse) Header() http.Header         { return r.header }
func (r *recordedResponse) WriteHeader(status int)      { r.status = status }
func (r *recordedResponse) Write(b []byte) (int, error) { return r.body.Write(b) }

// wrap returns l, accepting within the limit and from sources not locked
// out.
func (cl *connLimit) wrap(l net.Listener) net.Listener {
	if cl.max <= 0 && cl.perIP <= 0 && cl.lockedOut == nil {
		return l
	}
	return &limitListener{Listener: l, lim: cl}
}

// prefixOf is the IPv6 site src counts under for perPrefix, when src is
// an IPv6 source and the cap is set.
func (cl *connLimit) prefixOf(src pigeon.Source) (netip.Prefix, bool) {
	if cl.perPrefix <= 0 {
		return netip.Prefix{}, false
	}
	site, ok := cl.site.Of(src)
	return site.Prefix(), ok
}

// take reserves a place for a connection from src (invalid: an address
// that is not IP, counted in all only).
func (cl *connLimit) take(src pigeon.Source) bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.max > 0 && cl.open >= cl.max {
		return false
	}
	if cl.perIP > 0 && src.IsValid() {
		if cl.byIP[src] >= cl.perIP {
			return false
		}
		if p, ok := cl.prefixOf(src); ok {
			if cl.byPrefix[p] >= cl.perPrefix {
				return false
			}
			cl.byPrefix[p]++
		}
		cl.byIP[src]++
	}
	cl.open++
	return true
}

// give frees the place take reserved.
func (cl *connLimit) give(src pigeon.Source) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.open--
	if cl.perIP > 0 && src.IsValid() {
		if n := cl.byIP[src] - 1; n > 0 {
			cl.byIP[src] = n
		} else {
			delete(cl.byIP, src)
		}
		if p, ok := cl.prefixOf(src); ok {
			if n := cl.byPrefix[p] - 1; n > 0 {
				cl.byPrefix[p] = n
			} else {
				delete(cl.byPrefix, p)
			}
		}
	}
}

// refuse answers c, a connection beyond the limit, and closes it (see
// answerAndClose).
func (cl *connLimit) refuse(c net.Conn) {
	n := cl.refused.Add(1)
	if now := time.Now().UnixNano(); now-cl.lastWarn.Load() >= int64(time.Minute) {
		cl.lastWarn.Store(now)
		cl.logger.Warn("connection refused: limit reached", "max", cl.max, "maxPerIP", cl.perIP, "maxPerSite", cl.perPrefix, "sitePrefixBits", cl.site.Bits, "refused", n, "remote", c.RemoteAddr().String())
	}
	cl.answerAndClose(c, func() []byte { return cl.answer })
}

// refuseLocked answers c, a connection from src, locked out for left
// more, as the API answers the source's requests (429 RATE_LIMITED,
// Retry-After), and closes it (see answerAndClose). One warning a minute
// is logged while such connections come.
func (cl *connLimit) refuseLocked(c net.Conn, src pigeon.Source, left time.Duration) {
	n := cl.locked.Add(1)
	if now := time.Now().UnixNano(); now-cl.lastLocked.Load() >= int64(time.Minute) {
		cl.lastLocked.Store(now)
		cl.logger.Warn("connection refused: source locked out after failed authentications", "source", src.String(), "retryAfter", left, "refused", n)
	}
	cl.answerAndClose(c, func() []byte {
		return refusalResponse(&pigeon.Error{Code: pigeon.CodeRateLimited, Message: "too many failed authentications from this address; try again later",
			Details: map[string]any{"retryAfterMs": left.Milliseconds()}})
	})
}

// answerAndClose closes c, a refused connection. Over plain HTTP it
// writes answer() first, a whole HTTP response (after TLS there is no
// handshake to answer in, so it only closes), from a goroutine of a
// bounded few, so that Accept goes on at once; with none free it only
// closes.
func (cl *connLimit) answerAndClose(c net.Conn, answer func() []byte) {
	if cl.tls {
		_ = c.Close()
		return
	}
	select {
	case cl.answers <- struct{}{}:
	default:
		_ = c.Close()
		return
	}
	go func() {
		defer func() { <-cl.answers }()
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(refusalWait))
		if _, err := c.Write(answer()); err != nil {
			return
		}
		// Read what the client sent until it closes (or the wait ends):
		// closing with unread bytes would reset the connection and could
		// discard the answer before the client reads it.
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}()
}

// limitListener accepts connections its connLimit lets in; it refuses the
// others itself and goes on accepting.
type limitListener struct {
	net.Listener
	lim *connLimit
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		peer := remoteAddr(c)
		src := pigeon.SourceOfAddr(peer)
		if l.lim.proxies.trusts(peer) {
			// The source of each request is the client X-Forwarded-For
			// names: the proxy is not locked out for it, and all its
			// clients are not one source of the per-IP cap.
			src = pigeon.Source{}
		} else if l.lim.lockedOut != nil {
			if left, locked := l.lim.lockedOut(src); locked {
				l.lim.refuseLocked(c, src, left)
				continue
			}
		}
		if l.lim.take(src) {
			return &limitedConn{Conn: c, lim: l.lim, src: src}, nil
		}
		l.lim.refuse(c)
	}
}

// remoteAddr is c's remote IP address, or the zero Addr when c is not IP.
func remoteAddr(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr()
	}
	return netip.Addr{}
}

// limitedConn frees its place in the limit when it is first closed,
// whoever closes it: net/http, or a WebSocket that hijacked it.
type limitedConn struct {
	net.Conn
	lim    *connLimit
	src    pigeon.Source
	closed atomic.Bool
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.lim.give(c.src)
	}
	return err
}

// CloseWrite half-closes the connection when the one underneath can.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("server: the connection cannot half-close")
}

// ConnStats counts the connections Serve refused as it accepted them,
// over all its listeners, since New.
type ConnStats struct {
	// Refused were beyond Options.MaxConnections or MaxConnectionsPerIP
	// (or the site's multiple of it from the /64s of one IPv6 site:
	// Options.ConnectionSite).
	Refused uint64
	// LockedOut came from a source locked out for refused credentials
	// (pigeon.Engine.LockedOut) and were closed before any TLS handshake
	// (answered 429 RATE_LIMITED first over plain HTTP).
	LockedOut uint64
}

// ConnStats returns the counts of refused connections. It is safe for
// concurrent use.
func (s *Server) ConnStats() ConnStats {
	return ConnStats{Refused: s.conns.refused.Load(), LockedOut: s.conns.locked.Load()}
}
