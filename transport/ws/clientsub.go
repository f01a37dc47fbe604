package ws

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"pigeon"
)

// clientSub is the client side of a subscription: it runs the handler for
// each deliver frame on a goroutine of its own (the server never has more
// than maxInFlight deliveries of one subscription unanswered) and answers
// ack when the handler returns nil, nack when it fails or panics.
type clientSub struct {
	s       *Session
	subject string
	h       pigeon.Handler
	o       pigeon.SubscribeOptions
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	lastSeq atomic.Uint64

	mu       sync.Mutex
	sid      string
	stopping bool
	running  sync.WaitGroup
	err      error
	finished bool
}

var _ pigeon.Subscription = (*clientSub)(nil)

// Subscribe starts push delivery of subject to h; see Session.Subscribe of
// package pigeon. Middleware runs on the client, around h.
func (s *Session) Subscribe(ctx context.Context, subject string, h pigeon.Handler, opts ...pigeon.SubscribeOption) (pigeon.Subscription, error) {
	if h == nil {
		return nil, pigeon.NewError(pigeon.CodeInvalidArgument, "a handler is required")
	}
	var o pigeon.SubscribeOptions
	for _, fn := range opts {
		fn(&o)
	}
	for i := len(o.Middleware) - 1; i >= 0; i-- {
		h = o.Middleware[i](h)
	}
	cc, err := s.conn()
	if err != nil {
		return nil, err
	}
	cs := &clientSub{s: s, subject: subject, h: h, o: o, done: make(chan struct{})}
	cs.ctx, cs.cancel = context.WithCancel(context.Background())
	s.mu.Lock()
	s.subs[cs] = struct{}{}
	s.mu.Unlock()
	if err := cs.subscribeOn(ctx, cc, o.Start); err != nil {
		cs.abandon(cc, nil)
		return nil, err
	}
	return cs, nil
}

// abandon ends a subscription whose subscribe call failed; when the server
// subscribed all the same (the caller stopped waiting just before the
// answer), it ends that too.
func (cs *clientSub) abandon(cc *clientConn, err error) {
	cs.finish(err)
	if sid := cs.ID(); sid != "" {
		cs.s.goBG(func() { cs.s.endOrphan(cc, sid) })
	}
}

// subscribeOn subscribes on cc; the answer's hook routes the new sub id to
// cs before the reader reads the first delivery.
func (cs *clientSub) subscribeOn(ctx context.Context, cc *clientConn, start pigeon.Start) error {
	f := Frame{Op: OpSubscribe, Subject: cs.subject, Selector: cs.o.Selector, Filter: cs.o.Filter, Group: cs.o.Group, MaxInFlight: cs.o.MaxInFlight}
	if start != pigeon.StartNew {
		f.Start, _ = json.Marshal(start)
	}
	_, err := cc.call(ctx, jsonFrame(f), func(a *Frame) {
		s := cs.s
		s.mu.Lock()
		cs.mu.Lock()
		if cs.finished {
			// The caller gave up before this answer: end what it started.
			cs.mu.Unlock()
			s.mu.Unlock()
			s.goBG(func() { s.endOrphan(cc, a.Sub) })
			return
		}
		if s.bySID[cs.sid] == cs {
			delete(s.bySID, cs.sid)
		}
		cs.sid = a.Sub
		cs.mu.Unlock()
		s.bySID[a.Sub] = cs
		s.mu.Unlock()
	})
	return err
}

// endOrphan ends a server subscription that no client subscription owns.
func (s *Session) endOrphan(cc *clientConn, sid string) {
	if !cc.orphan(sid) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.o.settleTimeout)
	defer cancel()
	_, _ = cc.call(ctx, jsonFrame(Frame{Op: OpUnsubscribe, Sub: sid}), nil)
}

// ID is the server's id of the subscription; it changes on Reconnect.
func (cs *clientSub) ID() string {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.sid
}

func (cs *clientSub) Done() <-chan struct{} { return cs.done }

func (cs *clientSub) Err() error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.err
}

func (cs *clientSub) isStopping() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.stopping
}

// Unsubscribe stops deliveries, waits for running handlers (or ctx) and
// ends the subscription on the server. It is idempotent.
func (cs *clientSub) Unsubscribe(ctx context.Context) error {
	cc, err := cs.s.conn()
	if err != nil {
		// The session is closed: Close ended the subscription.
		select {
		case <-cs.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return cs.unsubscribeOn(ctx, cc)
}

func (cs *clientSub) unsubscribeOn(ctx context.Context, cc *clientConn) error {
	cs.mu.Lock()
	already := cs.stopping
	cs.stopping = true
	sid := cs.sid
	cs.mu.Unlock()
	if already {
		select {
		case <-cs.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err := cs.waitRunning(ctx)
	if sid != "" {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cs.s.o.settleTimeout)
		_, _ = cc.call(uctx, jsonFrame(Frame{Op: OpUnsubscribe, Sub: sid}), nil)
		cancel()
	}
	cs.finish(nil)
	return err
}

// waitRunning waits for the handlers that are running, or ctx.
func (cs *clientSub) waitRunning(ctx context.Context) error {
	idle := make(chan struct{})
	go func() {
		cs.running.Wait()
		close(idle)
	}()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		cs.cancel()
		return ctx.Err()
	}
}

// stopWith ends the subscription because the server ended it, or a
// resubscription was refused.
func (cs *clientSub) stopWith(err error) {
	cs.mu.Lock()
	if cs.stopping {
		cs.mu.Unlock()
		return
	}
	cs.stopping = true
	cs.mu.Unlock()
	cs.cancel()
	cs.running.Wait()
	cs.finish(err)
}

// finish forgets the subscription and closes Done (once).
func (cs *clientSub) finish(err error) {
	s := cs.s
	s.mu.Lock()
	cs.mu.Lock()
	if cs.finished {
		cs.mu.Unlock()
		s.mu.Unlock()
		return
	}
	cs.finished, cs.stopping, cs.err = true, true, err
	delete(s.subs, cs)
	if s.bySID[cs.sid] == cs {
		delete(s.bySID, cs.sid)
	}
	cs.mu.Unlock()
	s.mu.Unlock()
	cs.cancel()
	close(cs.done)
}

// deliver runs on the reader: it starts the handler for one deliver frame.
// A delivery that no running subscription wants is left unanswered: the
// unsubscribe that ends its server subscription gives it back to the group
// at once, without spending an attempt on a consumer that never saw it.
func (s *Session) deliver(cc *clientConn, f *Frame) {
	m := f.Message
	if m == nil || m.ID == "" {
		// Nothing to hand over or answer; the ack wait gives it back.
		s.o.logger.Warn("pigeon ws: deliver frame without a message; ignored", "sub", f.Sub)
		return
	}
	s.mu.Lock()
	cs := s.bySID[f.Sub]
	s.mu.Unlock()
	if cs == nil {
		// A server subscription the client does not know (its subscribe
		// call gave up before the answer came): end it.
		s.goBG(func() { s.endOrphan(cc, f.Sub) })
		return
	}
	cs.mu.Lock()
	stopping := cs.stopping
	if !stopping {
		cs.running.Add(1)
	}
	cs.mu.Unlock()
	if stopping {
		// Unsubscribing: its unsubscribe follows once the running
		// handlers have answered, or the server already ended it.
		return
	}
	id := m.ID
	if m.Sequence > 0 {
		for {
			last := cs.lastSeq.Load()
			if m.Sequence <= last || cs.lastSeq.CompareAndSwap(last, m.Sequence) {
				break
			}
		}
	}
	go func() {
		defer cs.running.Done()
		err := cs.call(&pigeon.Delivery{Subject: cs.subject, Message: m, Attempt: f.Attempt, Session: s})
		s.settle(cc, f.Sub, id, err)
	}()
}

// call runs the handler once, recovering a panic as a failure.
func (cs *clientSub) call(d *pigeon.Delivery) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("pigeon: handler panicked: %v", p)
			cs.s.o.logger.Error("pigeon ws: handler panicked", "subject", cs.subject, "panic", p)
		}
	}()
	return cs.h(cs.ctx, d)
}

// settle answers a delivery: ack when the handler returned nil, nack
// otherwise, with the delay a pigeon.RetryAfter error asks for.
func (s *Session) settle(cc *clientConn, sid, messageID string, handlerErr error) {
	if messageID == "" {
		return
	}
	f := Frame{Op: OpAck, Sub: sid, MessageID: messageID}
	if handlerErr != nil {
		f.Op = OpNack
		var re *pigeon.RetryError
		if errors.As(handlerErr, &re) && re.Delay >= 0 {
			ms := re.Delay.Milliseconds()
			f.DelayMs = &ms
		}
	}
	op := f.Op
	ctx, cancel := context.WithTimeout(context.Background(), s.o.settleTimeout)
	defer cancel()
	if _, err := cc.call(ctx, jsonFrame(f), nil); err != nil {
		s.o.logger.Debug("pigeon ws: settle failed", "op", op, "sub", sid, "err", err)
	}
}

// serverEnded stops the subscription the server says has ended.
func (s *Session) serverEnded(f *Frame) {
	s.mu.Lock()
	cs := s.bySID[f.Sub]
	s.mu.Unlock()
	if cs == nil {
		return
	}
	var err error
	if f.Error != nil {
		err = f.Error.Err()
	}
	s.goBG(func() { cs.stopWith(err) })
}
