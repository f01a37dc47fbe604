package ws

import (
	"fmt"
	"runtime/debug"
	"time"

	"github.com/coder/websocket"

	"pigeon"
)

// survive, deferred by an op's worker, turns a panic of the op into what
// net/http makes of a handler's: the op is answered INTERNAL, the panic
// is logged with its stack, and the connection is closed with 1011 (what
// the op left half done is its alone), while the broker and its other
// connections go on. Unrecovered, a panic on a worker goroutine ends the
// process and every connection it holds. The close is queued behind the
// answer, as surviveRead's is, from a goroutine of the connection's (the
// worker, or the read loop for a negotiate, must not wait for the
// writer): closed at once, it was written ahead of the frames queued
// before, and the client lost the answer and those frames. A connection
// whose close is not written within the stall timeout (its client reads
// nothing) is cut then. The panic is counted in Stats.Panics.
func (c *conn) survive(f *Frame) {
	p := recover()
	if p == nil {
		return
	}
	c.srv.stats.panics.Add(1)
	c.srv.opts.Logger.ErrorContext(c.ctx, "a websocket op panicked: answered INTERNAL, closing the connection",
		"op", f.Op, "principal", c.principal.ID, "panic", pigeon.RedactPANs(fmt.Sprint(p)), "stack", string(debug.Stack()))
	c.answer(f.ID, pigeon.NewError(pigeon.CodeInternal, "the server failed on this %s", f.Op))
	c.goBG(func() {
		c.closeBehind(websocket.StatusInternalError, "internal error")
		c.abort()
	})
}

// surviveRead, deferred by the read loop, turns a panic of the loop's own
// work (reading and decoding a frame, settling a delivery, admitting a
// batch, whatever it does inline rather than on a worker) into the end of
// this connection alone, as survive does for an op's worker: the frame,
// when its id is known, is answered INTERNAL, the panic is logged with
// its stack, card numbers redacted, and the connection is closed with
// 1011 behind the frames queued before, and counted in Stats.Panics. The loop then returns, and serve's
// teardown releases what the connection held: its subscriptions end and
// give back the deliveries they hold (to the group, for another consumer),
// its ops finish, its slot among the principal's connections is freed.
// Unrecovered, the panic reached net/http, which logged its value whole
// and left the hijacked connection open and never torn down: all of that
// was held until the process ended.
func (c *conn) surviveRead(cur **Frame) {
	p := recover()
	if p == nil {
		return
	}
	f := *cur
	op := ""
	if f != nil {
		op = servedOp(f.Op)
	}
	c.srv.stats.panics.Add(1)
	c.srv.opts.Logger.ErrorContext(c.ctx, "the websocket read loop panicked: closing the connection",
		"op", op, "principal", c.principal.ID, "panic", pigeon.RedactPANs(fmt.Sprint(p)), "stack", string(debug.Stack()))
	if f != nil {
		// The loop dispatches only frames whose id is set and short.
		c.answer(f.ID, pigeon.NewError(pigeon.CodeInternal, "the server failed on this %s frame", op))
	}
	c.closeBehind(websocket.StatusInternalError, "internal error")
}

// servedOp is op when it is one a client sends, else "unknown": a frame's
// op is the client's text, which a log keeps only when it is a known name.
func servedOp(op string) string {
	switch op {
	case OpNegotiate, OpRenew, OpPublish, OpPublishBatch, OpSubscribe, OpAck, OpNack,
		OpUnsubscribe, OpRequest, OpReplay, OpReceive, OpPing:
		return op
	}
	return "unknown"
}

// closeBehind closes the connection with code once the frames queued
// before are written (the writer performs the close handshake), and waits
// for it to end, for the stall timeout at most: teardown, which follows,
// cuts the connection then if it has not ended.
func (c *conn) closeBehind(code websocket.StatusCode, reason string) {
	t := time.NewTimer(c.srv.opts.StallTimeout)
	defer t.Stop()
	select {
	case c.out <- outFrame{close: code, reason: reason}:
	case <-c.ctx.Done():
		return
	case <-t.C:
		return
	}
	select {
	case <-c.ctx.Done():
	case <-t.C:
	}
}

// hook calls the test's readHook (Options.readHook), if any, with f.
func (c *conn) hook(f *Frame) {
	if h := c.srv.opts.readHook; h != nil {
		h(f)
	}
}
