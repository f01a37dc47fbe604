package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"pigeon"
	"pigeon/internal/wire"
)

// connLimit caps the connections a Server holds open at once: in all
// (Options.MaxConnections) and per source (Options.MaxConnectionsPerIP:
// a pigeon.Source: an IPv4 address, or an IPv6 /64). Every listener of the
// Server shares it.
// Its methods are safe for concurrent use.
type connLimit struct {
	max, perIP int // <= 0: no cap
	tls        bool
	logger     *slog.Logger

	mu   sync.Mutex
	open int
	byIP map[pigeon.Source]int

	refused  atomic.Uint64
	lastWarn atomic.Int64  // unix nanoseconds of the last warning logged
	answers  chan struct{} // tokens of the goroutines that answer refused connections
	answer   []byte        // what a refused plain-HTTP connection reads
}

// refusalAnswerers bounds the refused connections answered at once; beyond
// it a refused connection is closed without an answer, so a flood costs
// no more than the accepts.
const refusalAnswerers = 32

// refusalWait bounds how long answering one refused connection may take.
const refusalWait = time.Second

func newConnLimit(max, perIP int, tls bool, logger *slog.Logger) *connLimit {
	l := &connLimit{max: max, perIP: perIP, tls: tls, logger: logger, byIP: map[pigeon.Source]int{},
		answers: make(chan struct{}, refusalAnswerers)}
	l.answer = refusalResponse(pigeon.NewError(pigeon.CodeRateLimited, "the server holds the most connections it allows; try again later"))
	return l
}

// refusalResponse is a whole HTTP/1.1 response carrying err as the API's
// refusals do (wire.WriteHTTPError), closing the connection.
func refusalResponse(err error) []byte {
	rec := &recordedResponse{header: http.Header{}}
	wire.WriteHTTPError(rec, err)
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", rec.status, http.StatusText(rec.status))
	rec.header.Set("Connection", "close")
	rec.header.Set("Retry-After", "1")
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

// wrap returns l, accepting within the limit.
func (cl *connLimit) wrap(l net.Listener) net.Listener {
	if cl.max <= 0 && cl.perIP <= 0 {
		return l
	}
	return &limitListener{Listener: l, lim: cl}
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
	}
}

// refuse answers c, a connection beyond the limit, and closes it. Over
// plain HTTP it writes a 429 RATE_LIMITED response first (after TLS there
// is no handshake to answer in, so it only closes), from a goroutine of
// a bounded few, so that Accept goes on at once.
func (cl *connLimit) refuse(c net.Conn) {
	n := cl.refused.Add(1)
	if now := time.Now().UnixNano(); now-cl.lastWarn.Load() >= int64(time.Minute) {
		cl.lastWarn.Store(now)
		cl.logger.Warn("connection refused: limit reached", "max", cl.max, "maxPerIP", cl.perIP, "refused", n, "remote", c.RemoteAddr().String())
	}
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
		if _, err := c.Write(cl.answer); err != nil {
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

// limitListener accepts connections within its connLimit; it refuses the
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
		src := remoteSource(c)
		if l.lim.take(src) {
			return &limitedConn{Conn: c, lim: l.lim, src: src}, nil
		}
		l.lim.refuse(c)
	}
}

// remoteSource is c's remote source, or the zero Source when c is not IP.
func remoteSource(c net.Conn) pigeon.Source {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return pigeon.SourceOfAddr(a.AddrPort().Addr())
	}
	return pigeon.Source{}
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
