package ws

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"pigeon"
)

// conn is one server-side connection. Three goroutines serve it: the
// reader (the HTTP handler's goroutine, which decodes frames and dispatches
// them), the writer (the only one that writes data frames, from the
// bounded queue out) and the pinger. Work on frames runs on the workers
// of opWorkers, bounded by the in-flight semaphore.
type conn struct {
	srv       *Server
	ws        *websocket.Conn
	cork      *corkConn // nil when the connection could not be wrapped
	principal *pigeon.Principal
	region    string
	// cred is the credential the upgrade authenticated, checked again by
	// Server.Reauthenticate; remote the peer's address, for its log.
	cred   pigeon.Credential
	remote string
	// refusal is set (once, opMu held) when Server.Reauthenticate found
	// cred refused: every frame read after it is answered with it.
	refusal atomic.Pointer[error]

	// ctx ends when the connection is torn down; every op runs under it.
	ctx    context.Context
	cancel context.CancelFunc
	// io is ctx without its end, for the reader's and the writer's
	// frames: the socket is closed as ctx ends (serve), so neither needs
	// the WebSocket library to watch ctx for each frame (a context
	// callback armed and disarmed per frame, a few allocations each).
	io context.Context

	out       chan outFrame
	queued    atomic.Int64  // frames in out or being written by the writer
	wmu       sync.Mutex    // held while a frame is written to the socket
	ownTimer  *time.Timer   // writeOwn's (wmu held)
	ownStart  atomic.Int64  // when the write of writeOwn running began (since epoch, plus 1), 0 when none
	budget    budget        // bytes of the frames in out (and being written)
	written   atomic.Uint64 // frames written: progress, for the stall timeout
	stalled   atomic.Bool
	closeOnce sync.Once

	mu     sync.Mutex
	caller pigeon.Caller
	subs   map[string]*serverSub
	// contracts are those negotiated on the connection and not yet
	// expired when the last was negotiated, revoked when its credential
	// is refused (refuse).
	contracts map[string]pigeon.Contract

	// opMu orders op registration against draining, so that ops.Add never
	// races ops.Wait.
	opMu     sync.Mutex
	draining bool
	ops      sync.WaitGroup
	sem      chan struct{}
	requests atomic.Int64

	bucket bucket
	bg     sync.WaitGroup
}

// outFrame is one queued write: a data frame holding n bytes of the write
// budgets, or (close != 0) the close that ends a graceful drain after every
// frame queued before it.
type outFrame struct {
	b      []byte
	n      int64
	close  websocket.StatusCode
	reason string
	sub    *serverSub // the subscription whose deliveries b holds, if any
	wire   *wireState // whether b went to the socket, when it holds deliveries awaiting an answer
	buf    *[]byte    // b's buffer, from frameBufs: the writer gives it back once done with b
	guard  *guard     // the check an answer carrying messages passes just before its write, if any
}

// guard is the contract check an answer that carries messages (a
// receive's, a replay's, a request's reply) passes just before it is
// written (Engine.Recheck): it may have waited in the write queue behind a
// slow reader for as long as the stall timeout, and what the contract no
// longer allows then is not written. The refusal is written under the
// answer's id instead, so the call fails with it rather than waiting out
// its deadline.
type guard struct {
	caller  pigeon.Caller
	subject string
	op      pigeon.Operation
	re      string
}

// guarded returns b, or the refusal that replaces it when g's contract no
// longer allows it (counted as a cut frame).
func (c *conn) guarded(b []byte, g *guard) []byte {
	if g == nil {
		return b
	}
	err := c.srv.e.Recheck(c.ctx, g.caller, g.subject, g.op)
	if err == nil {
		return b
	}
	c.srv.stats.cut.Add(1)
	return encodeError(g.re, err)
}

// wireState says whether a frame of deliveries went to the socket. The
// frame in the write queue and the pending entry of every delivery it
// holds share it. It is decided once, by whichever comes first: the writer
// begins writing the frame (from then on the client may see its
// deliveries, even if the write fails), or the end of the connection
// withholds it (the writer then never writes it, and its deliveries go
// back to the group without spending an attempt).
type wireState struct{ v atomic.Uint32 }

const (
	wireQueued   uint32 = iota // in the write queue, or being gathered in a batch
	wireWriting                // the writer began writing it
	wireWithheld               // never written, and never will be
)

// write claims the frame for the writer, just before its write begins; it
// reports false when the frame was withheld and must not be written. A nil
// w (a frame no answer waits for) is always written.
func (w *wireState) write() bool {
	return w == nil || w.v.CompareAndSwap(wireQueued, wireWriting)
}

// withheld reports whether the frame will never be written.
func (w *wireState) withheld() bool { return w != nil && w.v.Load() == wireWithheld }

// drop withholds the frame from the writer when it has not begun writing
// it; it reports whether the frame was never written (withheld now or
// before). The writer calls it for a frame it skips, the end of the
// connection for the deliveries still pending.
func (w *wireState) drop() bool {
	return w != nil && (w.v.CompareAndSwap(wireQueued, wireWithheld) || w.v.Load() == wireWithheld)
}

var (
	errStalled = pigeon.NewError(pigeon.CodeSessionClosed, "connection stalled")
	errGone    = pigeon.NewError(pigeon.CodeSessionClosed, "connection closed")
)

// newConn is the connection of an upgraded request; its context keeps the
// request context's values (the request id its log lines carry), not its
// cancellation.
func newConn(reqCtx context.Context, s *Server, wsc *websocket.Conn, cork *corkConn, p *pigeon.Principal, region string) *conn {
	c := &conn{srv: s, ws: wsc, cork: cork, principal: p, region: region, out: make(chan outFrame, s.opts.WriteQueue),
		budget: budget{limit: s.opts.WriteQueueBytes},
		subs:   map[string]*serverSub{}, sem: make(chan struct{}, s.opts.MaxInFlight),
		bucket: newBucket(s.opts.PublishRate, s.opts.PublishBurst)}
	c.caller = pigeon.Caller{Principal: p, Region: region}
	c.ctx, c.cancel = context.WithCancel(context.WithoutCancel(reqCtx))
	c.io = context.WithoutCancel(c.ctx)
	return c
}

// serve runs the connection until it ends, then tears it down.
func (c *conn) serve() {
	// A read or a write blocked on the socket ends when ctx does, as it
	// would under ctx: the socket is closed then.
	context.AfterFunc(c.ctx, func() { _ = c.ws.CloseNow() })
	c.goBG(c.writeLoop)
	if c.srv.opts.PingInterval > 0 {
		c.goBG(c.pingLoop)
	}
	c.readLoop()
	c.teardown()
}

func (c *conn) goBG(fn func()) {
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		fn()
	}()
}

// readLoop reads and dispatches frames until the connection fails.
func (c *conn) readLoop() {
	var (
		buf = frameBuf{keep: maxKeptBuffer}
		in  interner // strings that repeat across this connection's frames
		cur *Frame   // the frame being dispatched, for surviveRead
	)
	defer c.surviveRead(&cur)
	for {
		cur = nil
		typ, err := buf.read(c.io, c.ws)
		if err != nil {
			if errors.Is(err, websocket.ErrMessageTooBig) {
				c.srv.stats.tooBig.Add(1)
			}
			return
		}
		if typ != websocket.MessageText {
			c.answer("", pigeon.NewError(pigeon.CodeBadRequest, "frames are JSON text"))
			continue
		}
		if !utf8.Valid(buf.frame) {
			// RFC 6455 §8.1: a text message must be UTF-8; the WebSocket
			// library leaves that check to us.
			c.srv.stats.badText.Add(1)
			c.close(websocket.StatusInvalidFramePayloadData, "text frame is not valid UTF-8")
			return
		}
		f, err := decodeServerFrame(buf.frame, &in)
		if err != nil {
			re := ""
			if f != nil && len(f.ID) <= MaxFrameID {
				re = f.ID
			}
			c.answer(re, err)
			continue
		}
		switch {
		case f.ID == "":
			c.answer("", pigeon.NewError(pigeon.CodeBadRequest, `a frame needs a string "id"`))
			continue
		case len(f.ID) > MaxFrameID:
			// Each answer echoes it, escaped (a '<' takes six bytes), and
			// is built before it waits for room in the write queue.
			c.answer("", pigeon.NewError(pigeon.CodeBadRequest, `a frame's "id" is at most %d bytes`, MaxFrameID))
			continue
		}
		f.size = len(buf.frame)
		cur = f
		c.dispatch(f)
	}
}

// dispatch answers cheap ops inline and runs the others on a worker of
// their own (opWorkers).
func (c *conn) dispatch(f *Frame) {
	switch f.Op {
	case OpPing:
		_ = c.send(c.ctx, encodeSimple(OpPong, f.ID))
		return
	case OpAck, OpNack:
		if f.Sub != "" {
			// Inline: it only hands the answer to the waiting handler.
			c.hook(f)
			c.settleSub(f)
			return
		}
		// A pulled message settles in the store: off the read loop.
	case OpPublish, OpRequest:
		if !c.bucket.take(time.Now()) {
			c.srv.stats.rateLimited.Add(1)
			c.rateDenied(f, 1)
			c.answer(f.ID, errRateLimited)
			return
		}
	case OpPublishBatch:
		if !c.admitBatch(f) {
			return
		}
	case OpNegotiate:
		// Inline: every frame read after it runs under the new contract.
		if !c.begin() {
			c.answer(f.ID, c.stopped())
			return
		}
		func() {
			// On the read loop, not a worker: survive answers a panic
			// INTERNAL and closes the connection, as for any op.
			defer c.ops.Done()
			defer c.survive(f)
			c.handle(f, pigeon.Caller{})
			c.keepContract(c.callerNow().ContractID)
		}()
		return
	case OpSubscribe, OpUnsubscribe, OpReplay, OpReceive, OpRenew:
	default:
		c.answer(f.ID, pigeon.NewError(pigeon.CodeBadRequest, "unknown op %q", f.Op))
		return
	}
	if !c.begin() {
		c.answer(f.ID, c.stopped())
		return
	}
	// The op counted (begin) is the read loop's to give back until a
	// worker takes it, also when the loop panics meanwhile (surviveRead):
	// teardown waits for every op counted.
	counted := true
	defer func() {
		if counted {
			c.ops.Done()
		}
	}()
	c.hook(f)
	// A frame runs under the contract in force when it was read, however
	// long it waits for a slot.
	caller := c.callerNow()
	if f.Op == OpRequest {
		// A request waits for a reply that may come from this very
		// connection: it must not hold a slot that the reply needs.
		if c.requests.Add(1) > int64(cap(c.sem)) {
			c.requests.Add(-1)
			counted = false
			c.ops.Done()
			c.srv.stats.rateLimited.Add(1)
			c.requestDenied(f, caller, "in flight")
			c.answer(f.ID, pigeon.NewError(pigeon.CodeRateLimited, "too many requests waiting on this connection"))
			return
		}
		// Each waits holding its message, and the rest of its frame, for
		// up to MaxRequestTimeout: the requests of one principal, over all
		// its connections, hold at most MaxRequestBytesPerPrincipal.
		held, ok := c.srv.holdRequest(c.principal.ID, frameRequestCost(f))
		if !ok {
			c.requests.Add(-1)
			counted = false
			c.ops.Done()
			c.srv.stats.rateLimited.Add(1)
			c.requestDenied(f, caller, "bytes")
			c.answer(f.ID, errRequestBytes())
			return
		}
		counted = false
		opWorkers.run(func() {
			defer c.ops.Done()
			defer c.requests.Add(-1)
			defer c.survive(f)
			c.request(f, caller, held)
		})
		return
	}
	select {
	case c.sem <- struct{}{}:
	case <-c.ctx.Done():
		return // counted: the deferred call gives it back
	}
	counted = false
	opWorkers.run(func() {
		defer c.ops.Done()
		defer func() { <-c.sem }()
		defer c.survive(f)
		c.handle(f, caller)
	})
}

// begin registers one op unless the connection is draining.
func (c *conn) begin() bool {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if c.draining {
		return false
	}
	c.ops.Add(1)
	return true
}

// stopped is why begin refused a frame: the refusal of the connection's
// credential (refuse), or the server's shutdown.
func (c *conn) stopped() error {
	if p := c.refusal.Load(); p != nil {
		return *p
	}
	return errServerShutdown()
}

// keepContract records id, the contract the connection acts under after
// a negotiate frame, among the contracts it negotiated, forgetting those
// that had expired by then (on the engine's clock: the new one's issue).
// When the connection's credential was refused meanwhile (refuse), id is
// revoked instead.
func (c *conn) keepContract(id string) {
	if id == "" {
		return
	}
	k, err := c.srv.e.GetContract(c.ctx, c.principal, id)
	c.mu.Lock()
	if c.refusal.Load() != nil {
		c.mu.Unlock()
		_ = c.srv.e.RevokeContract(context.WithoutCancel(c.ctx), c.principal, id)
		return
	}
	if err != nil || c.contracts[id] != nil {
		c.mu.Unlock()
		return // unknown (expired and swept), or kept already
	}
	if c.contracts == nil {
		c.contracts = map[string]pigeon.Contract{}
	}
	issued := k.Info().IssuedAt
	for oid, old := range c.contracts {
		if !old.ExpiresAt().After(issued) {
			delete(c.contracts, oid)
		}
	}
	c.contracts[id] = k
	c.mu.Unlock()
}

// refuse ends the connection because its credential is refused now
// (refusal; see Server.Reauthenticate): no frame read from now on is
// worked on, every contract it negotiated is revoked, and it is closed
// with 1008 and the refusal's code once the frames queued before are
// written. The revocations that fail are added to errs. It reports
// whether this call ended the connection (false: an earlier one did).
func (c *conn) refuse(ctx context.Context, refusal error, errs *[]error) bool {
	c.opMu.Lock()
	first := c.refusal.CompareAndSwap(nil, &refusal)
	c.draining = true
	c.opMu.Unlock()
	if !first {
		return false
	}
	code := pigeon.ErrorCode(refusal)
	c.srv.opts.Logger.WarnContext(c.ctx, "websocket credential refused when checked again; revoking its contracts and closing",
		"principal", c.principal.ID, "remote", c.remote, "code", code)
	// The contract negotiated last may not be recorded yet (keepContract
	// runs once its answer is queued); one still being negotiated is
	// revoked by keepContract.
	c.mu.Lock()
	contracts := c.contracts
	c.contracts = nil
	ids := make([]string, 0, len(contracts)+1)
	for id := range contracts {
		ids = append(ids, id)
	}
	if id := c.caller.ContractID; id != "" && contracts[id] == nil {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	for _, id := range ids {
		if err := c.srv.e.RevokeContract(ctx, c.principal, id); err != nil {
			switch pigeon.ErrorCode(err) {
			case pigeon.CodeContractNotFound, pigeon.CodeContractExpired: // over already
			default:
				*errs = append(*errs, fmt.Errorf("principal %s: revoking contract %s: %w", c.principal.ID, id, err))
			}
		}
	}
	// Behind what is queued (the deliveries of the subscriptions just
	// ended are dropped, not written); a connection that stopped reading
	// is closed when its writes stall.
	go func() {
		select {
		case c.out <- outFrame{close: websocket.StatusPolicyViolation, reason: string(code)}:
		case <-c.ctx.Done():
		}
	}()
	return true
}

// send queues one frame. It waits while the connection's write queue or
// write budgets are full; when its own frames make no progress for the
// stall timeout the connection is closed with 1008 and send fails.
//
// An answer finds the writer idle more often than not: when nothing is
// queued or being written, the caller writes the frame itself, which
// spares it the hand-off to the writer (a wake-up, tens of microseconds
// on a busy machine). Frames keep the order in which they were sent
// either way. Deliveries always go through the queue, whose writer
// detects a consumer that stopped reading.
func (c *conn) send(ctx context.Context, b []byte) error {
	return c.sendFrame(ctx, b, nil, nil)
}

// sendGuarded is send for an answer that carries messages: g checks the
// contract again just before the write (see guard).
func (c *conn) sendGuarded(ctx context.Context, b []byte, g *guard) error {
	return c.sendFrame(ctx, b, g, nil)
}

// sendFrame is send for b, checked by g before its write when not nil
// (sendGuarded), held in buf from frameBufs when not nil: buf goes back
// there once b is written, or is left to the collector when b is not.
func (c *conn) sendFrame(ctx context.Context, b []byte, g *guard, buf *[]byte) error {
	n := int64(len(b))
	if err := c.reserve(ctx, n); err != nil {
		return err
	}
	if !c.stalled.Load() && c.queued.CompareAndSwap(0, 1) {
		c.wmu.Lock()
		err := c.writeOwn(c.guarded(b, g))
		c.unreserve(n)
		c.written.Add(1)
		c.wmu.Unlock()
		c.queued.Add(-1)
		if err != nil {
			c.abort()
			return errGone
		}
		putFrameBuf(buf, b) // written: nothing refers to it
		return nil
	}
	return c.enqueueOut(ctx, outFrame{b: b, n: n, guard: g, buf: buf})
}

// writeOwn writes b for send, wmu held, within the stall timeout: a write
// that lasts longer aborts the connection, as one past its context's
// deadline did. One timer per connection, armed for each such write,
// spares the context, its timer and the WebSocket library's callback on
// it that each write would cost (an answer to every ack frame).
func (c *conn) writeOwn(b []byte) error {
	c.ownStart.Store(int64(time.Since(epoch)) + 1)
	if c.ownTimer == nil {
		c.ownTimer = time.AfterFunc(c.srv.opts.StallTimeout, c.ownOverdue)
	} else {
		c.ownTimer.Reset(c.srv.opts.StallTimeout)
	}
	err := c.writeAlone(b)
	c.ownStart.Store(0)
	c.ownTimer.Stop()
	return err
}

// writeAlone writes b, a frame that goes out on its own, in one system
// call (see corkLarge).
func (c *conn) writeAlone(b []byte) error {
	if len(b) <= corkLarge || c.cork == nil {
		return c.ws.Write(c.io, websocket.MessageText, b)
	}
	c.cork.cork()
	err := c.ws.Write(c.io, websocket.MessageText, b)
	if e := c.cork.uncork(); err == nil {
		err = e
	}
	return err
}

// epoch is what ownStart counts from, on the monotonic clock.
var epoch = time.Now()

// ownOverdue aborts the connection when the write of writeOwn running now
// began the stall timeout ago or more, counted and logged as a stall of
// the queue is (Stats.Stalled); a timer that fired for a write that has
// ended does nothing. It aborts rather than closes: the close frame would
// wait for the write that is stuck.
func (c *conn) ownOverdue() {
	if at := c.ownStart.Load(); at != 0 && time.Duration(int64(time.Since(epoch))+1-at) >= c.srv.opts.StallTimeout {
		if !c.stalled.Swap(true) {
			c.srv.stats.stalled.Add(1)
			c.srv.opts.Logger.WarnContext(c.ctx, "websocket answer write stalled; closing", "principal", c.principal.ID)
		}
		c.abort()
	}
}

// enqueueFor queues a frame that holds n reserved bytes (on failure it
// gives them back), of deliveries of sub, which the writer
// drops instead of writing when the engine has ended sub by then for a
// refusal (serverSub.cut) or when the end of the connection withheld it
// (w, the frame's wireState; nil when no answer waits for the frame).
func (c *conn) enqueueFor(ctx context.Context, b []byte, n int64, sub *serverSub, w *wireState) error {
	return c.enqueueOut(ctx, outFrame{b: b, n: n, sub: sub, wire: w})
}

// enqueueOut queues f (see enqueueFor).
func (c *conn) enqueueOut(ctx context.Context, f outFrame) error {
	n := f.n
	if c.stalled.Load() {
		c.unreserve(n)
		return errStalled
	}
	c.queued.Add(1)
	select {
	case c.out <- f:
		return nil
	default:
	}
	t := time.NewTimer(c.srv.opts.StallTimeout)
	defer t.Stop()
	select {
	case c.out <- f:
		return nil
	case <-t.C:
		c.queued.Add(-1)
		c.unreserve(n)
		c.stall()
		return errStalled
	case <-ctx.Done():
		c.queued.Add(-1)
		c.unreserve(n)
		return ctx.Err()
	case <-c.ctx.Done():
		c.queued.Add(-1)
		c.unreserve(n)
		return errGone
	}
}

// tryReserve takes n bytes of the connection's and the server's write
// budgets when both have room.
func (c *conn) tryReserve(n int64) bool {
	ok, _, _ := c.reserveOnce(n)
	return ok
}

// reserveOnce takes n bytes of the connection's budget and then of the
// server's, unless either is spent; wait, returned then, is closed when
// the one that is spent gets bytes back. When the server's is spent, own
// is closed when the connection's gets bytes back too (closed already when
// it holds none): a connection with nothing queued may always queue one frame, so
// its last frame written must wake a reservation waiting on the server's
// budget, which a connection that stopped reading may never give back to.
// (unreserve gives the server's bytes first: woken by them, a waiter that
// looked again before the connection's came back waited on the server's
// alone, and was never woken.)
func (c *conn) reserveOnce(n int64) (ok bool, wait, own <-chan struct{}) {
	ok, first, wait := c.budget.take(n, false)
	if !ok {
		return false, wait, nil
	}
	if ok, _, wait = c.srv.budget.take(n, first); !ok {
		c.budget.give(n)
		return false, wait, c.budget.emptied()
	}
	return true, nil, nil
}

// reserve takes n bytes of the connection's and the server's write
// budgets, waiting while either is spent. A connection whose writer makes
// no progress for the stall timeout while it waits is stalled (1008).
// Waiting on the server's budget alone cannot last: a connection with
// nothing queued always gets room for one frame.
func (c *conn) reserve(ctx context.Context, n int64) error {
	var (
		t        *time.Timer
		progress uint64
	)
	for {
		if c.stalled.Load() {
			return errStalled
		}
		ok, wait, own := c.reserveOnce(n)
		if ok {
			return nil
		}
		if t == nil {
			t = time.NewTimer(c.srv.opts.StallTimeout)
			defer t.Stop()
			progress = c.written.Load()
		}
		select {
		case <-wait:
		case <-own:
		case <-t.C:
			if c.written.Load() == progress {
				c.stall()
				return errStalled
			}
			progress = c.written.Load()
			t.Reset(c.srv.opts.StallTimeout)
		case <-ctx.Done():
			return ctx.Err()
		case <-c.ctx.Done():
			return errGone
		}
	}
}

// holdAll returns what a frame of size bytes, for which n bytes of the
// write budgets were reserved, holds of them: n, or size when its
// encoding came out larger (long envelope fields, escaped), the rest taken
// now whatever the budgets' use, as the one frame a connection may always
// queue is; the reservations after it wait for it.
func (c *conn) holdAll(size int, n int64) int64 {
	extra := int64(size) - n
	if extra <= 0 {
		return n
	}
	c.budget.take(extra, true)
	c.srv.budget.take(extra, true)
	return n + extra
}

// unreserve gives back n bytes of the write budgets.
func (c *conn) unreserve(n int64) {
	// The server's first: it never counts more than its connections do.
	c.srv.budget.give(n)
	c.budget.give(n)
}

// answer queues an error frame answering re. A store's damage, which the
// frame does not locate (wire.Public), is logged with its cause.
func (c *conn) answer(re string, err error) {
	if pigeon.ErrorCode(err) == pigeon.CodeStoreCorrupt {
		c.srv.opts.Logger.ErrorContext(c.ctx, "store damage met by a request", "principal", c.principal.ID, "error", err.Error())
	}
	_ = c.send(c.ctx, encodeError(re, err))
}

// stall closes a connection whose writes stopped making progress.
func (c *conn) stall() {
	if c.stalled.Swap(true) {
		return
	}
	c.srv.stats.stalled.Add(1)
	c.srv.opts.Logger.WarnContext(c.ctx, "websocket write queue stalled; closing", "principal", c.principal.ID)
	c.goBG(func() { c.close(websocket.StatusPolicyViolation, "write stalled") })
}

// close performs the close handshake with code (once) and then tears the
// connection's context down.
func (c *conn) close(code websocket.StatusCode, reason string) {
	c.closeOnce.Do(func() {
		_ = c.ws.Close(code, reason)
		c.cancel()
	})
}

// abort closes the connection at once, without a handshake.
func (c *conn) abort() {
	c.cancel()
	_ = c.ws.CloseNow()
}

// writeLoop writes queued frames in order. The first frame of a burst goes
// out at once, the rest under one cork, in one system call.
func (c *conn) writeLoop() {
	for {
		var f outFrame
		select {
		case f = <-c.out:
		case <-c.ctx.Done():
			return
		}
		// The first frame goes out at once; what queued up meanwhile
		// follows under one cork.
		var err error
		c.wmu.Lock()
		for n := 0; f.b != nil && err == nil && !c.stalled.Load(); n++ {
			switch {
			case f.sub != nil && f.sub.cut():
				f.wire.drop()
				c.srv.stats.cut.Add(1)
			case f.guard != nil && n == 0:
				err = c.writeAlone(c.guarded(f.b, f.guard))
			case f.guard != nil:
				err = c.ws.Write(c.io, websocket.MessageText, c.guarded(f.b, f.guard))
			case !f.wire.write():
			case n == 0:
				err = c.writeAlone(f.b) // out at once
			default:
				err = c.ws.Write(c.io, websocket.MessageText, f.b)
			}
			putFrameBuf(f.buf, f.b) // written (or dropped): nothing refers to it
			c.unreserve(f.n)
			c.written.Add(1)
			c.queued.Add(-1)
			f = outFrame{}
			if n < maxBatch-1 {
				if f = nextQueued(c.out); n == 0 && f.b != nil {
					corkOn(c.cork)
				}
			}
		}
		if e := corkOff(c.cork); err == nil {
			err = e
		}
		c.wmu.Unlock()
		if f.b != nil {
			c.queued.Add(-1)
		}
		c.unreserve(f.n) // a frame taken but not written (stalled)
		switch {
		case err != nil:
			c.abort()
			return
		case f.close != 0:
			c.close(f.close, f.reason)
			return
		case c.stalled.Load():
			return
		}
	}
}

// pingLoop keeps the connection alive and drops it when a pong does not
// come back in time.
func (c *conn) pingLoop() {
	t := time.NewTicker(c.srv.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			ctx, cancel := context.WithTimeout(c.ctx, c.srv.opts.PingTimeout)
			err := c.ws.Ping(ctx)
			cancel()
			if err != nil {
				if c.ctx.Err() == nil {
					// A peer that does not answer pings will not answer a
					// close handshake either.
					c.srv.stats.pingTimeouts.Add(1)
					c.srv.opts.Logger.WarnContext(c.ctx, "websocket keepalive timeout; closing", "principal", c.principal.ID)
					c.abort()
				}
				return
			}
		case <-c.ctx.Done():
			return
		}
	}
}

// drain closes the connection gracefully (see Server.Shutdown).
func (c *conn) drain() {
	c.opMu.Lock()
	c.draining = true
	c.opMu.Unlock()
	c.stopSubs()
	c.ops.Wait()
	c.stopSubs() // those that subscribe frames worked on meanwhile started
	select {
	case c.out <- outFrame{close: websocket.StatusGoingAway, reason: "server shutting down"}:
	case <-c.ctx.Done():
	}
}

// teardown releases everything once the reader has stopped.
func (c *conn) teardown() {
	c.cancel()
	c.stopSubs()
	c.opMu.Lock()
	c.draining = true
	c.opMu.Unlock()
	c.ops.Wait()
	// A subscribe frame worked on meanwhile may have started one more: its
	// watcher would keep the connection from ever finishing.
	c.stopSubs()
	_ = c.ws.CloseNow()
	c.bg.Wait()
	// Frames never written give their bytes back.
	for {
		select {
		case f := <-c.out:
			c.unreserve(f.n)
		default:
			return
		}
	}
}
