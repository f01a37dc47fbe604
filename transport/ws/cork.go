package ws

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
)

// corkConn is the network connection under a WebSocket. The WebSocket
// library flushes every frame with a write of its own; while a writer loop
// is corked, those writes collect in a buffer instead and go out together
// when it uncorks, so that a burst of queued frames costs one system call.
// A frame larger than the library's buffer, which it writes in pieces, is
// corked on its own for the same reason (corkLarge).
// Writes from other goroutines (pongs, close frames) keep their order: every
// write and the flush take the same lock.
//
// The buffer comes from corkBufs when a corked write is collected and goes
// back once it is written, so an idle connection holds none, and it is
// allocated at maxCork so that collecting never grows it.
type corkConn struct {
	net.Conn
	mu     sync.Mutex
	corked bool
	buf    *[]byte // collected writes, nil when none
}

// maxCork bounds what a cork collects before it writes anyway.
const maxCork = 256 << 10

var corkBufs = sync.Pool{New: func() any { b := make([]byte, 0, maxCork); return &b }}

func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corked && len(p) <= maxCork {
		if c.buf == nil {
			c.buf = corkBufs.Get().(*[]byte)
		}
		if len(*c.buf)+len(p) <= maxCork {
			*c.buf = append(*c.buf, p...)
			return len(p), nil
		}
	}
	if err := c.flushLocked(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// flushLocked writes what was collected and gives the buffer back.
func (c *corkConn) flushLocked() error {
	bp := c.buf
	if bp == nil {
		return nil
	}
	c.buf = nil
	var err error
	if len(*bp) > 0 {
		_, err = c.Conn.Write(*bp)
	}
	*bp = (*bp)[:0]
	corkBufs.Put(bp)
	return err
}

// cork starts collecting writes.
func (c *corkConn) cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

// uncork writes what was collected and stops collecting.
func (c *corkConn) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	return c.flushLocked()
}

// corkWriter makes the connection hijacked from w a corkConn.
type corkWriter struct {
	http.ResponseWriter
	cc *corkConn
}

func (w *corkWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	// The controller finds the Hijacker under wrappers that only Unwrap
	// (the server's request logger).
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if err := brw.Writer.Flush(); err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	w.cc = &corkConn{Conn: conn}
	return w.cc, bufio.NewReadWriter(brw.Reader, bufio.NewWriterSize(w.cc, 4096)), nil
}

func (w *corkWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// corkClient returns an HTTP client whose connection becomes a corkConn,
// stored in out once dialed.
func corkClient(out *atomic.Pointer[corkConn], tc *tls.Config) *http.Client {
	d := &net.Dialer{}
	return &http.Client{Transport: &http.Transport{
		Proxy:           http.ProxyFromEnvironment,
		TLSClientConfig: tc,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			cc := &corkConn{Conn: conn}
			out.Store(cc)
			return cc, nil
		},
	}}
}

// maxBatch bounds the frames a writer loop sends under one cork.
const maxBatch = 64

// corkLarge is the size past which a frame written on its own is corked
// too: the WebSocket library writes a frame through a 4 KiB buffer, so a
// larger one in pieces, a client's (masked in that buffer) in one system
// call per 4 KiB, a server's in two. Corked, it leaves in one.
const corkLarge = 4096 - 14 // the buffer less the largest frame header

// corkOn and corkOff cork c when it is a corkConn.
func corkOn(c *corkConn) {
	if c != nil {
		c.cork()
	}
}

func corkOff(c *corkConn) error {
	if c != nil {
		return c.uncork()
	}
	return nil
}

// nextQueued returns the next queued item, yielding once to the goroutines
// that may be about to queue one, or the zero value.
func nextQueued[T any](q chan T) T {
	var zero T
	for i := 0; i < 2; i++ {
		select {
		case v := <-q:
			return v
		default:
		}
		if i == 0 {
			runtime.Gosched()
		}
	}
	return zero
}
