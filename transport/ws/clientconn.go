package ws

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"pigeon"
	"pigeon/internal/wire"
)

// clientConn is one WebSocket connection of a Session. Its reader routes
// answers to waiting calls by "re" and pushes to subscriptions; its writer
// writes what is queued. A call (send) or a synchronous publish
// (publishNow) that finds the writer idle and nothing queued writes its
// frame itself instead, sparing the hand-off to the writer (a wake-up,
// tens of microseconds on a busy machine, on the path of every request);
// wmu keeps one writer at a time and queued keeps the frames in order.
// Writes never use a caller's context, so a caller's deadline never tears
// the connection down.
type clientConn struct {
	s      *Session
	ws     *websocket.Conn
	cork   *corkConn // nil with a caller's HTTP client
	ctx    context.Context
	cancel context.CancelFunc
	// io is the context of the connection's reads and writes. With the
	// session's own HTTP client it is ctx without its end, and the socket
	// (cork's) is closed as ctx ends, which ends a read or a write at
	// once as ctx's end would: the WebSocket library then does not watch
	// a context for each read and each write (a callback armed and
	// disarmed, a few allocations each, several per frame). With a
	// caller's HTTP client, whose socket is not at hand, it is ctx.
	io   context.Context
	out  chan []byte
	pq   *pubQueue // publishes waiting for the writer
	seq  atomic.Uint64
	done chan struct{}
	bg   sync.WaitGroup

	// wmu is held by whoever writes: the writer for a burst (up to its
	// flush), or a caller writing its own frame. wbuf is its buffer for
	// publish frames.
	wmu  sync.Mutex
	wbuf []byte
	// queued counts the frames sent to out and not yet written: a caller
	// writes its own frame only when it is 0, so it never overtakes one.
	queued atomic.Int64
	// writing is odd while a write (or a cork's flush) is under way, and
	// counts them: the stall watch ends a connection on which one write
	// takes longer than the write timeout (a server that stopped reading
	// would hold its writer, and every caller after it, for ever).
	writing atomic.Uint64
	// quiet is set by the keepalive and cleared by the reader when it
	// reads a frame: still set a while later, the connection was idle
	// (keepAlive). The reader only loads it, but once a keepalive tick.
	quiet atomic.Bool

	mu      sync.Mutex
	pending map[string]*pendingCall
	orphans map[string]bool // server subscriptions being told to end
	ended   bool
	err     *pigeon.Error
}

// pendingCall waits for one answer. hook, when set, runs on the reader
// goroutine before any later frame is read (a subscribe uses it to route
// deliveries that follow the answer at once), even when the caller has
// stopped waiting.
type pendingCall struct {
	ch   chan *Frame
	hook func(*Frame)
	pub  []*PendingPublish // instead of ch: the publishes the frame carried
}

// wsURL makes u the URL of the WebSocket endpoint.
func wsURL(u string, query url.Values) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", pigeon.WrapError(pigeon.CodeInvalidArgument, err, "bad URL")
	}
	switch p.Scheme {
	case "ws", "http":
		p.Scheme = "ws"
	case "wss", "https":
		p.Scheme = "wss"
	default:
		return "", pigeon.NewError(pigeon.CodeInvalidArgument, "URL scheme must be ws, wss, http or https")
	}
	if p.Path == "" || p.Path == "/" {
		p.Path = "/v1/ws"
	}
	if len(query) > 0 {
		q := p.Query()
		for k, v := range query {
			q[k] = v
		}
		p.RawQuery = q.Encode()
	}
	return p.String(), nil
}

// dialConn opens and authenticates one connection.
func (s *Session) dialConn(ctx context.Context) (*clientConn, error) {
	hdr := s.o.header.Clone()
	if hdr == nil {
		hdr = http.Header{}
	}
	protos := []string{Subprotocol}
	query := url.Values{}
	if s.o.subprotocolAuth {
		protos = append(protos, BearerSubprotocolPrefix+s.cred)
		if s.o.connect.Region != "" {
			query.Set("region", s.o.connect.Region)
		}
	} else {
		hdr.Set("Authorization", "Bearer "+s.cred)
		if s.o.connect.Region != "" {
			hdr.Set("X-Pigeon-Region", s.o.connect.Region)
		}
	}
	u, err := wsURL(s.url, query)
	if err != nil {
		return nil, err
	}
	hc := s.o.client
	var cork atomic.Pointer[corkConn]
	if hc == nil {
		hc = corkClient(&cork, s.o.tls)
	}
	wsc, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: hc, HTTPHeader: hdr, Subprotocols: protos})
	if s.o.client == nil {
		hc.CloseIdleConnections()
	}
	if err != nil {
		return nil, dialError(resp, err)
	}
	wsc.SetReadLimit(s.o.maxFrame)
	cc := &clientConn{s: s, ws: wsc, cork: cork.Load(), out: make(chan []byte, s.o.writeQueue), pq: newPubQueue(), done: make(chan struct{}), pending: map[string]*pendingCall{}}
	cc.ctx, cc.cancel = context.WithCancel(context.Background())
	cc.io = cc.ctx
	if cc.cork != nil {
		cc.io = context.WithoutCancel(cc.ctx)
		// The socket itself: the WebSocket library's CloseNow waits for
		// a close handshake under way (close) rather than ending it, as
		// the end of a read's context did.
		context.AfterFunc(cc.ctx, func() { _ = cc.cork.Close() })
	}
	cc.bg.Add(3)
	go cc.readLoop()
	go cc.writeLoop()
	go cc.watchWrites(s.o.writeTimeout)
	if s.o.pingInterval > 0 {
		cc.bg.Add(1)
		go cc.keepAlive(s.o.pingInterval, s.o.pingTimeout)
	}
	return cc, nil
}

// write writes one frame, as the stall watch sees.
func (cc *clientConn) write(b []byte) error {
	cc.writing.Add(1)
	err := cc.ws.Write(cc.io, websocket.MessageText, b)
	cc.writing.Add(1)
	return err
}

// writeAlone writes b, a frame that goes out on its own, in one system
// call (see corkLarge).
func (cc *clientConn) writeAlone(b []byte) error {
	if len(b) <= corkLarge || cc.cork == nil {
		return cc.write(b)
	}
	corkOn(cc.cork)
	err := cc.write(b)
	if e := cc.uncork(); err == nil {
		err = e
	}
	return err
}

// uncork writes what the cork collected, as the stall watch sees.
func (cc *clientConn) uncork() error {
	cc.writing.Add(1)
	err := corkOff(cc.cork)
	cc.writing.Add(1)
	return err
}

// watchWrites ends the connection when a write has made no progress for
// about d (between d and 2d), until the connection ends.
func (cc *clientConn) watchWrites(d time.Duration) {
	defer cc.bg.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	var last uint64
	for {
		select {
		case <-cc.ctx.Done():
			return
		case <-t.C:
		}
		w := cc.writing.Load()
		if w%2 == 1 && w == last {
			cc.s.o.logger.Warn("pigeon ws: a write made no progress; the server stopped reading; closing", "timeout", d)
			if cc.end(pigeon.NewError(pigeon.CodeSessionClosed, "the server stopped reading: a write made no progress for %s; call Reconnect", d)) {
				cc.cancel()
				_ = cc.ws.CloseNow()
			}
			return
		}
		last = w
	}
}

// keepAliveTicks is how many times per ping interval the keepalive looks
// whether a frame was read: it pings between d and d+d/keepAliveTicks
// after the last frame read.
const keepAliveTicks = 4

// keepAlive pings the server once no frame has been read for d, and ends
// the connection when the pong does not come within timeout, until the
// connection ends. A connection that reads frames never pings: the reader
// pays one load of quiet per frame, and a store once a tick.
func (cc *clientConn) keepAlive(d, timeout time.Duration) {
	defer cc.bg.Done()
	t := time.NewTicker(max(d/keepAliveTicks, time.Millisecond))
	defer t.Stop()
	cc.quiet.Store(true)
	idle := 0 // ticks since quiet was set, all without a frame read
	for {
		select {
		case <-cc.ctx.Done():
			return
		case <-t.C:
		}
		if !cc.quiet.Load() {
			cc.quiet.Store(true)
			idle = 0
			continue
		}
		if idle++; idle < keepAliveTicks {
			continue
		}
		idle = 0
		ctx, cancel := context.WithTimeout(cc.ctx, timeout)
		err := cc.ws.Ping(ctx)
		unanswered := err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded)
		cancel()
		if err == nil {
			continue
		}
		if !unanswered || cc.ctx.Err() != nil {
			return // the connection ended meanwhile: the reader says why
		}
		cc.s.o.logger.Warn("pigeon ws: the server did not answer a ping; the connection is lost; closing", "timeout", timeout)
		if cc.end(pigeon.NewError(pigeon.CodeSessionClosed, "the server did not answer a ping within %s: the connection is lost; call Reconnect", timeout)) {
			cc.cancel()
			_ = cc.ws.CloseNow()
		}
		return
	}
}

// dialError turns a refused upgrade into the typed error its body carries.
func dialError(resp *http.Response, err error) error {
	if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
		var body struct {
			Error *wire.Error `json:"error"`
		}
		if resp.Body != nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
			if json.Unmarshal(b, &body) == nil && body.Error != nil {
				return body.Error.Err()
			}
		}
		return pigeon.NewError(pigeon.CodeSessionClosed, "upgrade refused with HTTP %d", resp.StatusCode)
	}
	return pigeon.WrapError(pigeon.CodeSessionClosed, err, "cannot connect: %v", err)
}

func (cc *clientConn) readLoop() {
	defer cc.bg.Done()
	var (
		buf = frameBuf{keep: clientKeptBuffer}
		in  interner
	)
	for {
		typ, err := buf.read(cc.io, cc.ws)
		if err != nil {
			cc.fail(err)
			return
		}
		if cc.quiet.Load() {
			cc.quiet.Store(false) // once a keepalive tick at most
		}
		if typ == websocket.MessageText && !utf8.Valid(buf.frame) {
			// RFC 6455 §8.1, as the server does: close with 1007.
			cc.s.o.logger.Warn("pigeon ws: the server sent a text frame that is not UTF-8; closing")
			if cc.end(pigeon.NewError(pigeon.CodeSessionClosed, "the server sent a frame that is not UTF-8; call Reconnect")) {
				_ = cc.ws.Close(websocket.StatusInvalidFramePayloadData, "text frame is not valid UTF-8")
				cc.cancel()
			}
			return
		}
		f, err := decodeFromServer(buf.frame, &in)
		unread := err
		if err != nil {
			cc.s.o.logger.Warn("pigeon ws: undecodable frame from server", "err", err)
			if f == nil || f.Re == "" {
				continue
			}
			// The call it answers fails with the reason rather than
			// waiting for an answer that never comes.
			we := wire.Encode(err)
			f = &Frame{Op: OpError, Re: f.Re, Error: &we}
		}
		switch f.Op {
		case OpDeliver:
			cc.s.deliver(cc, f)
		case OpDeliverBatch:
			cc.s.deliverBatch(cc, f)
		case OpUnsubscribed:
			cc.s.serverEnded(f)
		default:
			if f.Re == "" {
				if f.Error != nil {
					cc.s.o.logger.Warn("pigeon ws: server error", "code", f.Error.Code, "message", f.Error.Message)
				}
				continue
			}
			cc.mu.Lock()
			p := cc.pending[f.Re]
			delete(cc.pending, f.Re)
			cc.mu.Unlock()
			if p == nil {
				continue
			}
			if p.pub != nil {
				if unread != nil {
					failAll(p.pub, unreadAnswer(buf.frame, len(p.pub), unread))
					continue
				}
				resolvePublishes(p.pub, f)
				continue
			}
			if p.hook != nil && f.Op != OpError {
				p.hook(f)
			}
			p.ch <- f
		}
	}
}

func (cc *clientConn) writeLoop() {
	defer cc.bg.Done()
	for {
		var b []byte
		select {
		case b = <-cc.out:
		case <-cc.pq.ready:
		case <-cc.ctx.Done():
			return
		}
		// The first frame goes out at once; what queued up meanwhile
		// follows under one cork. Publishes queued meanwhile leave
		// together, one frame per batch.
		var (
			err error
			n   int
		)
		fromOut := b != nil // a frame of out, which queued counts
		cc.wmu.Lock()
		for ; err == nil && n < maxBatch; n++ {
			if b == nil {
				b, fromOut = cc.nextPublishFrame(), false
			}
			if b == nil && n > 0 {
				b = nextQueued(cc.out)
				fromOut = b != nil
			}
			if b == nil {
				break
			}
			if n == 0 {
				err = cc.writeAlone(b) // out at once
			} else {
				if n == 1 {
					corkOn(cc.cork)
				}
				err = cc.write(b)
			}
			if fromOut {
				cc.queued.Add(-1)
			}
			b = nil
		}
		if e := cc.uncork(); err == nil {
			err = e
		}
		cc.wmu.Unlock()
		if err != nil {
			cc.fail(err)
			return
		}
		if n == maxBatch {
			// A burst that stopped at its bound may leave publishes queued
			// whose signal it took: come back for them.
			select {
			case cc.pq.ready <- struct{}{}:
			default:
			}
		}
	}
}

// closeError is why a connection ended, as the typed error calls return.
func closeError(err error) *pigeon.Error {
	switch websocket.CloseStatus(err) {
	case websocket.StatusGoingAway:
		return errServerShutdown()
	case websocket.StatusPolicyViolation:
		var ce websocket.CloseError
		errors.As(err, &ce)
		if c := pigeon.Code(ce.Reason); c.Known() {
			// The server's refusal, as its code (UNAUTHENTICATED: the
			// credential refused when checked again, Server.Reauthenticate):
			// a caller tells a credential to replace from a connection to
			// redial, as it would from an error frame.
			return pigeon.NewError(c, "the server closed the connection: %s", ce.Reason)
		}
		return pigeon.NewError(pigeon.CodeSessionClosed, "the server closed the connection: %s", ce.Reason)
	case websocket.StatusMessageTooBig:
		return pigeon.NewError(pigeon.CodeSessionClosed, "the server closed the connection: frame too big")
	}
	return pigeon.NewError(pigeon.CodeSessionClosed, "the connection was lost; call Reconnect")
}

// end marks the connection ended with err; it reports whether this call
// did it.
func (cc *clientConn) end(err *pigeon.Error) bool {
	cc.mu.Lock()
	if cc.ended {
		cc.mu.Unlock()
		return false
	}
	pending := cc.pending
	cc.ended, cc.err, cc.pending = true, err, nil
	cc.mu.Unlock()
	close(cc.done)
	// Publishes sent or queued fail with the connection, never hang.
	cc.pq.close(err)
	for _, p := range pending {
		if p.pub != nil {
			failAll(p.pub, err)
		}
	}
	return true
}

// fail ends the connection after a read or write error.
func (cc *clientConn) fail(err error) {
	if cc.end(closeError(err)) {
		cc.cancel()
		_ = cc.ws.CloseNow()
	}
}

// close ends the connection with a normal closure and waits for its
// goroutines. When ctx ends before the server answers the close, the
// connection is dropped.
func (cc *clientConn) close(ctx context.Context) {
	if cc.end(pigeon.NewError(pigeon.CodeSessionClosed, "the session is closed")) {
		stop := context.AfterFunc(ctx, cc.cancel) // a cancelled read drops the connection
		_ = cc.ws.Close(websocket.StatusNormalClosure, "")
		stop()
		cc.cancel()
	}
	cc.bg.Wait()
}

func (cc *clientConn) failed() error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.err == nil {
		return nil
	}
	return cc.err
}

// send writes one frame itself when the writer is idle and nothing is
// queued, and otherwise queues it for the writer.
func (cc *clientConn) send(ctx context.Context, b []byte) error {
	if cc.wmu.TryLock() {
		if cc.queued.Load() == 0 {
			err := cc.writeAlone(b)
			cc.wmu.Unlock()
			if err != nil {
				cc.fail(err)
				return cc.failed()
			}
			return nil
		}
		cc.wmu.Unlock()
	}
	cc.queued.Add(1)
	select {
	case cc.out <- b:
		return nil
	case <-ctx.Done():
		cc.queued.Add(-1)
		return ctxError(ctx)
	case <-cc.done:
		cc.queued.Add(-1)
		return cc.failed()
	}
}

// post queues the frame build renders for the writer without waiting for
// its answer (nor for room: a full queue drops it), for a caller that
// stopped waiting; its answer, naming an id no call waits for, is dropped.
func (cc *clientConn) post(build func(b []byte, id string) []byte) {
	id := strconv.FormatUint(cc.seq.Add(1), 36)
	b := build(make([]byte, 0, 256), id)
	cc.queued.Add(1)
	select {
	case cc.out <- b:
	default:
		cc.queued.Add(-1)
	}
}

func ctxError(ctx context.Context) error {
	return pigeon.WrapError(pigeon.CodeRequestTimeout, ctx.Err(), "the request ended before an answer: %v", ctx.Err())
}

// call sends the frame build renders for a fresh id and waits for its
// answer. An error frame comes back as the typed error it carries.
func (cc *clientConn) call(ctx context.Context, build func(b []byte, id string) []byte, hook func(*Frame)) (*Frame, error) {
	if ctx.Err() != nil {
		return nil, ctxError(ctx)
	}
	id := strconv.FormatUint(cc.seq.Add(1), 36)
	p := &pendingCall{ch: make(chan *Frame, 1), hook: hook}
	cc.mu.Lock()
	if cc.ended {
		err := cc.err
		cc.mu.Unlock()
		return nil, err
	}
	cc.pending[id] = p
	cc.mu.Unlock()
	if err := cc.send(ctx, build(make([]byte, 0, 256), id)); err != nil {
		cc.forget(id)
		return nil, err
	}
	select {
	case f := <-p.ch:
		return answerOf(f)
	case <-ctx.Done():
		if hook == nil {
			cc.forget(id)
		} // else the hook still sees the answer when it comes
		return nil, ctxError(ctx)
	case <-cc.done:
		select {
		case f := <-p.ch:
			return answerOf(f)
		default:
			return nil, cc.failed()
		}
	}
}

func answerOf(f *Frame) (*Frame, error) {
	if f.Op != OpError {
		return f, nil
	}
	if f.Error == nil {
		return nil, pigeon.NewError(pigeon.CodeInternal, "error frame without an error")
	}
	return nil, f.Error.Err()
}

// maxOrphanEnds bounds the unsubscribes a connection has in flight for
// subscriptions that deliveries name and the client does not know: each
// holds a goroutine and a call until answered, and a server (or anything
// writing on the connection) may name any number of them.
const maxOrphanEnds = 64

// orphan reports whether the unsubscribe of sub is not in flight yet, and
// records it. bounded (sub named only by a delivery) refuses it beyond
// maxOrphanEnds in flight; a subscribe answered after its caller gave up
// is always ended.
func (cc *clientConn) orphan(sub string, bounded bool) bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.orphans == nil {
		cc.orphans = map[string]bool{}
	}
	if cc.orphans[sub] || (bounded && len(cc.orphans) >= maxOrphanEnds) {
		return false
	}
	cc.orphans[sub] = true
	return true
}

// unorphan forgets sub once its unsubscribe is answered.
func (cc *clientConn) unorphan(sub string) {
	cc.mu.Lock()
	delete(cc.orphans, sub)
	cc.mu.Unlock()
}

func (cc *clientConn) forget(id string) {
	cc.mu.Lock()
	delete(cc.pending, id)
	cc.mu.Unlock()
}

// jsonFrame renders a frame with encoding/json, for ops off the hot path.
func jsonFrame(f Frame) func(b []byte, id string) []byte {
	return func(b []byte, id string) []byte {
		f.ID = id
		out, err := json.Marshal(&f)
		if err != nil {
			// Frame holds nothing json.Marshal refuses.
			panic("ws: encode frame: " + err.Error())
		}
		return append(b, out...)
	}
}
