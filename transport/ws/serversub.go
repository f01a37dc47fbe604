package ws

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"pigeon"
	"pigeon/internal/jsontext"
	"pigeon/internal/wire"
)

// serverSub is the server side of one WebSocket subscription: an engine
// subscription whose handler pushes each delivery to the client as a
// deliver frame and then waits for the client's ack or nack, the ack wait,
// or the end of the subscription or connection. Returning nil acks,
// returning an error nacks: leases, redelivery, backoff and exhaustion all
// stay the engine's.
type serverSub struct {
	c       *conn
	caller  pigeon.Caller // whose subscription: data read again is read as theirs
	ackWait time.Duration
	sub     pigeon.Subscription
	id      string
	readyCh chan struct{}
	ended   atomic.Bool // ended by the client or the connection: no push

	mu      sync.Mutex
	pending map[string]chan answer // by message id
}

var (
	errNacked  = errors.New("ws: the client nacked the delivery")
	errAckWait = errors.New("ws: the client did not answer within the ack wait")
	// errUnsubscribed: the client unsubscribed before answering.
	errUnsubscribed = errors.New("ws: the client unsubscribed before answering")
)

func newServerSub(c *conn, caller pigeon.Caller, ackWait time.Duration) *serverSub {
	return &serverSub{c: c, caller: caller, ackWait: ackWait, readyCh: make(chan struct{}), pending: map[string]chan answer{}}
}

// start registers the running engine subscription with the connection.
func (ss *serverSub) start(sub pigeon.Subscription) {
	ss.sub, ss.id = sub, sub.ID()
	ss.c.mu.Lock()
	ss.c.subs[ss.id] = ss
	ss.c.mu.Unlock()
	ss.c.goBG(ss.watch)
}

// ready lets deliveries flow once the subscribed answer is queued.
func (ss *serverSub) ready() { close(ss.readyCh) }

// watch forgets the subscription when it stops and, when it stopped on its
// own (contract revoked or expired, broker shutting down), tells the client.
func (ss *serverSub) watch() {
	<-ss.readyCh
	<-ss.sub.Done()
	c := ss.c
	c.mu.Lock()
	if c.subs[ss.id] == ss {
		delete(c.subs, ss.id)
	}
	c.mu.Unlock()
	if ss.ended.Load() {
		return
	}
	b := appendHead(make([]byte, 0, 128), OpUnsubscribed, "")
	b = append(b, `,"sub":`...)
	b = jsontext.AppendString(b, ss.id)
	if err := ss.sub.Err(); err != nil {
		we := wire.Encode(err)
		b = append(b, `,"error":{"code":`...)
		b = jsontext.AppendString(b, string(we.Code))
		b = append(b, `,"message":`...)
		b = jsontext.AppendString(b, we.Message)
		b = append(b, `,"details":{}}`...)
	}
	_ = c.send(c.ctx, append(b, '}'))
}

// end stops the subscription (idempotent) and waits for its handlers.
func (ss *serverSub) end() {
	ss.ended.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = ss.sub.Unsubscribe(ctx)
	<-ss.sub.Done()
}

// handle is the engine handler of the subscription. A delivery that never
// went out (the subscription or connection is ending, the write queue is
// stalled) is ErrUndelivered: back to the group at once, no attempt spent.
// One that went out is answered by the client, or fails when the ack wait
// passes; when the client unsubscribes first it is given back uncounted
// (the Go client leaves unanswered only what no handler saw), and when the
// connection or the engine subscription ends first it is given back at
// once as a spent attempt: the client may have seen it.
func (ss *serverSub) handle(ctx context.Context, d *pigeon.Delivery) error {
	select {
	case <-ss.readyCh:
	case <-ctx.Done():
		return undelivered(ctx.Err())
	}
	if ss.ended.Load() {
		return undelivered(errGone)
	}
	id := d.Message.ID
	ch := make(chan answer, 1)
	ss.mu.Lock()
	ss.pending[id] = ch
	ss.mu.Unlock()
	defer ss.forget(id, ch)
	b, n, err := ss.frame(ctx, d)
	if pigeon.ErrorCode(err) == pigeon.CodeMessageNotFound {
		return nil // trimmed by retention while it waited: nothing left to deliver
	}
	if err == nil {
		err = ss.c.enqueue(ctx, b, n)
	}
	if err != nil {
		if ctx.Err() == nil {
			// This consumer cannot take deliveries any more: stop
			// competing for them, or the group would hand them straight
			// back to it. (An engine subscription that is ending tells
			// the client why itself.)
			ss.stop()
		}
		return undelivered(err)
	}
	t := time.NewTimer(ss.ackWait)
	defer t.Stop()
	select {
	case a := <-ch:
		if a.ok {
			return nil
		}
		if a.delay >= 0 {
			return pigeon.RetryAfter(a.delay, errNacked)
		}
		return errNacked
	case <-t.C:
		return errAckWait
	case <-ctx.Done():
		if ss.c.ctx.Err() == nil && ss.ended.Load() {
			return undelivered(errUnsubscribed)
		}
		return pigeon.RetryAfter(0, ctx.Err())
	case <-ss.c.ctx.Done():
		return pigeon.RetryAfter(0, errGone)
	}
}

// frame renders the deliver frame of d once the connection's write budgets
// have room for it, and returns it with the bytes it holds. A client that
// reads slowly makes deliveries wait here: d's data is let go meanwhile
// and read back from the store when there is room, so that what waits for
// a slow client is bounded by the budgets, not by maxInFlight times the
// message size. d.Message is nil afterwards: the frame is all that is kept.
func (ss *serverSub) frame(ctx context.Context, d *pigeon.Delivery) ([]byte, int64, error) {
	m := d.Message
	d.Message = nil
	n := int64(len(m.Data)) + frameOverhead
	if !ss.c.tryReserve(n) {
		meta := *m
		meta.Data = nil
		m = &meta
		if err := ss.c.reserve(ctx, n); err != nil {
			return nil, 0, err
		}
		data, err := ss.storedData(ctx, m.ID)
		if err != nil {
			ss.c.unreserve(n)
			return nil, 0, err
		}
		m.Data = data
	}
	return encodeDeliver(make([]byte, 0, n), ss.id, m, d.Attempt), n, nil
}

// frameOverhead is what a deliver frame adds to the message data, at most
// for all but unusually long envelope fields.
const frameOverhead = 1024

// storedData reads the data of message id again, through the broker: the
// subscriber's contract is checked at this moment, after the wait.
func (ss *serverSub) storedData(ctx context.Context, id string) (json.RawMessage, error) {
	m, err := ss.c.srv.e.Message(ctx, ss.caller, id)
	if err != nil {
		return nil, err
	}
	return m.Data, nil
}

// undelivered marks err as a delivery that never reached the client.
func undelivered(err error) error { return fmt.Errorf("%w: %w", pigeon.ErrUndelivered, err) }

// stop ends the engine subscription without waiting for its handlers (a
// handler may call it).
func (ss *serverSub) stop() {
	ss.ended.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = ss.sub.Unsubscribe(ctx) // stops at once; waiting is end's business
}

func (ss *serverSub) forget(id string, ch chan answer) {
	ss.mu.Lock()
	if ss.pending[id] == ch {
		delete(ss.pending, id)
	}
	ss.mu.Unlock()
}

// answer is a client's ack (ok) or nack, with the nack's delay (< 0: the
// subject's backoff).
type answer struct {
	ok    bool
	delay time.Duration
}

// settle hands the client's answer to the waiting handler; it reports
// whether one was waiting.
func (ss *serverSub) settle(id string, a answer) bool {
	ss.mu.Lock()
	ch := ss.pending[id]
	delete(ss.pending, id)
	ss.mu.Unlock()
	if ch == nil {
		return false
	}
	ch <- a
	return true
}

// stopSubs ends every subscription of the connection.
func (c *conn) stopSubs() {
	c.mu.Lock()
	subs := make([]*serverSub, 0, len(c.subs))
	for _, ss := range c.subs {
		subs = append(subs, ss)
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, ss := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ss.end()
		}()
	}
	wg.Wait()
}
