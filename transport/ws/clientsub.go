package ws

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"pigeon"
	"pigeon/internal/jsontext"
)

// DefaultWindow is how many deliveries of one subscription the server may
// have on the wire unanswered, unless WithMaxInFlight asks for more: the
// client reads ahead of its handlers by up to this many messages.
const DefaultWindow = 256

// clientSub is the client side of a subscription. The reader queues each
// deliver frame; maxInFlight workers (one by default, so a handler sees
// one message at a time, in order) run the handler on them; an ack joins
// the next ack frame, which names every message acknowledged since the
// last one, and a failure or panic is nacked at once. The server has at
// most the window of deliveries unanswered, so the queue stays short.
//
// One message's handler runs once at a time: a delivery of a message
// whose handler is running (the server redelivered it when its ack wait
// passed, or the subscription resumed on a new connection while the old
// connection's run goes on) stays parked in the queue, in its place among
// the deliveries and counted against its bounds, until that run returns;
// then a worker takes it, and it is answered on its own connection. A
// message is its id and sequence: another message published under the id
// once retention trimmed the one running (a higher sequence) is not
// parked behind it, since each answer names its own sequence and the
// server settles the two apart. With one worker nothing can overlap, and
// nothing is tracked.
type clientSub struct {
	s       *Session
	subject string
	h       pigeon.Handler
	o       pigeon.SubscribeOptions
	ctx     context.Context
	hctx    context.Context // ctx, marked as the handlers' (handlerOf)
	cancel  context.CancelFunc
	done    chan struct{}
	lastSeq atomic.Uint64 // at most once: the highest sequence received

	// Where an acknowledged pubsub subscription resumes (Reconnect): the
	// sequences handed over and not yet handled successfully (a failure
	// keeps its sequence: the server's redelivery would have come on the
	// old connection), and the highest one handled successfully. Guarded
	// by mu.
	outstanding map[uint64]struct{}
	lastAcked   uint64
	from        uint64 // the first sequence the server subscription delivers (its subscribed answer); 0: not told

	mu       sync.Mutex
	cond     sync.Cond // on mu: the queue changed, or stopping
	queue    []queuedDelivery
	qbuf     []queuedDelivery // the array queue lives in, whole (see enqueue)
	queuedN  int              // the size of the data queue holds
	dropped  uint64           // at-most-once deliveries dropped with the queue full
	overflow uint64           // deliveries left unanswered beyond the window
	sid      string
	sidConn  *clientConn // the connection sid is of; written with s.mu and mu held
	stopping bool
	running  sync.WaitGroup // deliveries queued or being handled
	// The messages (id and sequence) whose handler runs, with more than
	// one worker (nil with one): a queued delivery of one of them is
	// parked.
	busy     map[runKey]struct{}
	err      error
	finished bool

	ackMu   sync.Mutex
	acks    []pendingAck
	spare   []pendingAck // the buffer of the acks last sent, empty, for acks to gather in next
	ackKick chan struct{}
	sendMu  sync.Mutex // held while ack frames are sent and answered
}

// runKey names one message of a subscription: a message id names one
// message at a time only (retention frees it), so its sequence goes with
// it (0 when the server sends none).
type runKey struct {
	id  string
	seq uint64
}

// queuedDelivery is one deliver frame waiting for a worker.
type queuedDelivery struct {
	cc      *clientConn
	sid     string
	m       *pigeon.Message
	attempt int
	d       *pigeon.Delivery // nil, or the Delivery for the handler, allocated with m
}

// pendingAck is one acknowledgement not yet sent: the id and the sequence
// of the message it answers.
type pendingAck struct {
	cc  *clientConn
	sid string
	id  string
	seq uint64
}

// maxQueued and maxQueuedBytes bound the deliveries of an at-most-once
// subscription queued on the client (it has no window), in number and in
// the size of their data: beyond either the client drops them, as
// at-most-once allows, rather than stop reading the connection, which
// would stall every answer a handler waits for (one delivery of any size
// is taken when none is queued). An acknowledged subscription's queue is
// bounded by its window, which the server keeps.
const (
	maxQueued      = 4096
	maxQueuedBytes = 64 << 20
)

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
	if o.AtMostOnce && o.Group != "" {
		return nil, pigeon.NewError(pigeon.CodeInvalidArgument, "at-most-once delivery is for pubsub subjects")
	}
	cs := &clientSub{s: s, subject: subject, h: h, o: o, done: make(chan struct{}), ackKick: make(chan struct{}, 1)}
	cs.cond.L = &cs.mu
	cs.ctx, cs.cancel = context.WithCancel(context.Background())
	cs.hctx = context.WithValue(cs.ctx, handlerOf{}, cs)
	workers := max(1, o.MaxInFlight)
	if o.MaxInFlight < 0 || o.MaxInFlight > pigeon.MaxInFlightLimit {
		workers = 1 // the server refuses the subscription
	}
	if workers > 1 {
		cs.busy = make(map[runKey]struct{}, min(workers, 64))
	}
	for range workers {
		s.goBG(cs.work)
	}
	if !o.AtMostOnce {
		s.goBG(cs.ackLoop)
	}
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
	if cs.o.MaxInFlight >= 0 {
		f.Window = cs.window()
	}
	if cs.o.AtMostOnce {
		f.Ack = AckNone
	}
	f.BatchDeliveries = true
	if start != pigeon.StartNew {
		f.Start, _ = json.Marshal(start)
	}
	var amiss error // the answer is not a subscribed frame naming a subscription
	_, err := cc.call(ctx, jsonFrame(f), func(a *Frame) {
		if a.Op != OpSubscribed || a.Sub == "" {
			// Nothing to route to cs, nor to end on the server.
			amiss = pigeon.NewError(pigeon.CodeInternal, "the server answered a subscribe with %q and no subscription id", a.Op)
			return
		}
		s := cs.s
		s.mu.Lock()
		if other := s.bySID[a.Sub]; other != nil && other != cs && other.sidConn == cc {
			// The id of another live subscription of this connection:
			// routed to cs, its deliveries would come here (and it would
			// end with cs). Refused; nothing is ended on the server (the
			// id is the other's).
			s.mu.Unlock()
			amiss = pigeon.NewError(pigeon.CodeInternal, "the server gave subscription id %q to a second subscription", a.Sub)
			return
		}
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
		cs.sid, cs.sidConn = a.Sub, cc
		if a.From > 0 {
			cs.from = a.From
			if asked, ok := start.Sequence(); ok && a.From < asked {
				// The server starts before the sequence asked for: the
				// subject was numbered anew (pigeon.StartAt), and what
				// this subscription handled counts for nothing on it.
				cs.lastAcked = 0
				cs.lastSeq.Store(0)
			}
		}
		cs.mu.Unlock()
		s.bySID[a.Sub] = cs
		s.mu.Unlock()
	})
	if err == nil {
		err = amiss // the hook ran before call returned its answer
	}
	return err
}

// window is how many deliveries the subscription asks the server to have
// unanswered at most: DefaultWindow, or MaxInFlight when larger.
func (cs *clientSub) window() int { return max(DefaultWindow, cs.o.MaxInFlight) }

// endOrphan ends a server subscription that no client subscription owns
// (a subscribe the caller gave up on).
func (s *Session) endOrphan(cc *clientConn, sid string) {
	if cc.orphan(sid, false) {
		s.unsubscribeOrphan(cc, sid)
	}
}

// unsubscribeOrphan sends the unsubscribe of sid, which cc.orphan
// recorded, and forgets it once answered (or the settle timeout passes):
// the server sends no deliver of it after its answer.
func (s *Session) unsubscribeOrphan(cc *clientConn, sid string) {
	defer cc.unorphan(sid)
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
// ends the subscription on the server; the acknowledgements of the
// handlers that succeeded are sent first, whatever ctx says (a caller's
// ended context would have them redelivered), bounded by the write
// timeout (WithWriteTimeout). Called from a handler of the session (this
// subscription's or another's) with the handler's context, it waits for
// no handler, which could wait for the caller: the subscription ends
// (Done) once its handlers have returned. It is idempotent.
func (cs *clientSub) Unsubscribe(ctx context.Context) error {
	cc, err := cs.s.conn()
	if err != nil {
		// The session is closed: Close ends the subscription.
		if cs.s.fromHandler(ctx) {
			// From a handler of the session, which that Close waits for.
			return nil
		}
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
	cs.cond.Broadcast()
	sid := cs.sid
	cs.mu.Unlock()
	if cs.s.fromHandler(ctx) {
		// From a handler of the session (this subscription's, or
		// another's, which Close or another Unsubscribe may wait for):
		// what follows waits for the running handlers, so it goes on
		// once they return, and Unsubscribe (or Close) waits for none.
		// The caller's handler runs on a session goroutine: bg is not
		// idle.
		if !already {
			cs.s.goBG(func() {
				cs.running.Wait()
				cs.unsubscribed(context.Background(), cc, sid)
			})
		}
		return nil
	}
	if already {
		select {
		case <-cs.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err := cs.waitRunning(ctx)
	cs.unsubscribed(ctx, cc, sid)
	return err
}

// unsubscribed ends the subscription once its handlers have returned (or
// waitRunning gave up on them): their acknowledgements are sent, whatever
// ctx says, then the unsubscribe.
func (cs *clientSub) unsubscribed(ctx context.Context, cc *clientConn, sid string) {
	// Acks the client decided to send do not depend on the caller's
	// context: the connection's write timeout bounds them.
	cs.flushAcks(min(cs.s.o.writeTimeout, cs.s.o.settleTimeout))
	if sid != "" {
		unsub := jsonFrame(Frame{Op: OpUnsubscribe, Sub: sid})
		if ctx.Err() != nil {
			// The caller stopped waiting: the server is told all the
			// same, and its answer not waited for.
			cc.post(unsub)
		} else {
			uctx, cancel := context.WithTimeout(ctx, cs.s.o.settleTimeout)
			_, _ = cc.call(uctx, unsub, nil)
			cancel()
		}
	}
	cs.finish(nil)
}

// handlerOf is the key of the value a subscription's handler context
// carries: the subscription, so that an Unsubscribe or Close from its own
// handler does not wait for itself.
type handlerOf struct{}

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
	cs.cond.Broadcast()
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
	cs.cond.Broadcast()
	delete(s.subs, cs)
	if s.bySID[cs.sid] == cs {
		delete(s.bySID, cs.sid)
	}
	cs.mu.Unlock()
	s.mu.Unlock()
	cs.cancel()
	close(cs.done)
}

// deliver runs on the reader: it queues one deliver frame for the
// workers (an at-most-once subscription drops it when its queue is full).
// A delivery that no running subscription wants is left unanswered: the
// unsubscribe that ends its server subscription gives it back to the
// group at once, without spending an attempt on a consumer that never saw
// it.
//
// A deliver whose message the decoder left out (its text in f.Batch, see
// decodeFromServer) is refused as a deliver_batch's entry is
// (refusedEntry).
func (s *Session) deliver(cc *clientConn, f *Frame) {
	if len(f.Batch) == 1 && f.Batch[0] != nil {
		s.refusedEntry(OpDeliver, -1, f.Sub, f.Batch[0], f.Attempt)
		return
	}
	if s.refused(OpDeliver, -1, f.Sub, f.Message, f.Attempt) {
		return
	}
	s.deliverOne(cc, f.Sub, f.Message, f.Attempt, nil)
}

// deliverBatch queues each delivery of a deliver_batch frame, in order.
// An entry the decoder left out (its text in f.Batch, see
// decodeFromServer) is refused alone (refusedEntry).
func (s *Session) deliverBatch(cc *clientConn, f *Frame) {
	for i, d := range f.Deliveries {
		if f.Batch != nil && f.Batch[i] != nil {
			s.refusedEntry(OpDeliverBatch, i, f.Sub, f.Batch[i], d.Attempt)
			continue
		}
		if s.refused(OpDeliverBatch, i, f.Sub, d.Message, d.Attempt) {
			continue
		}
		var pd *pigeon.Delivery
		if len(f.delivered) == len(f.Deliveries) {
			pd = f.delivered[i]
		}
		s.deliverOne(cc, f.Sub, d.Message, d.Attempt, pd)
	}
}

// maxAttempt is the highest lease attempt the client takes from the
// server, pushed or pulled: the TypeScript, Python and Rust clients'
// MAX_ATTEMPT. The broker counts attempts from 1 up to a subject's
// retry.maxAttempts, far below.
const maxAttempt = math.MaxInt32

// refused reports whether the delivery of message m under attempt, entry
// index of an op frame (-1: the frame's one), is one no broker sends: no
// message (null, absent) or one without an id (which no answer could
// name); a message without a sequence (every delivery comes from the log,
// and an ack by the id alone would settle whichever message holds the
// id); or an attempt outside 1 to maxAttempt (a frame without one reads
// as 0, and so does one that is no integer at all: a fraction, 1.0, a
// string, null, …; see decodeFromServer). Such a delivery is logged and
// dropped: not handed over, not answered (the server's ack wait gives it
// back), no resume position moved; the deliveries beside it in its
// deliver_batch go on. An entry of a deliver_batch the decoder could not
// read at all is refused the same way (refusedEntry).
func (s *Session) refused(op string, index int, sub string, m *pigeon.Message, attempt int) bool {
	var why, id string
	var seq uint64
	if m != nil {
		id, seq = m.ID, m.Sequence
	}
	switch {
	case m == nil:
		why = "without a message"
	case m.ID == "":
		why = "whose message has no id"
	case m.Sequence == 0:
		why = "without a sequence"
	case attempt < 1 || attempt > maxAttempt:
		why = "whose attempt is not an integer of 1 to 2^31-1"
	default:
		return false
	}
	s.o.logger.Warn("pigeon ws: the server sent a delivery "+why+"; not handed over",
		"op", op, "index", index, "sub", sub, "messageId", id, "sequence", seq, "attempt", attempt)
	return true
}

// refusedEntry refuses entry index of a deliver_batch (op) that the
// decoder left out, its text entry, or the message of a deliver (op,
// index -1) that it left out, its text entry (see decodeFromServer), as
// refused refuses a delivery no broker sends: logged, naming the entry
// and what can be read of its message (its id, sequence and attempt;
// empty or 0 when none can) and why it does not decode; not handed over,
// not answered (the server's ack wait gives it back), no resume position
// moved; the deliveries beside it go on.
func (s *Session) refusedEntry(op string, index int, sub string, entry []byte, attempt int) {
	what := "a deliver_batch entry that is no delivery"
	if op == OpDeliver {
		what = "a deliver whose message is no message"
	}
	r := leftOut(op, entry)
	s.o.logger.Warn("pigeon ws: the server sent "+what+" the broker sends; not handed over",
		"op", op, "index", index, "sub", sub, "messageId", r.id, "sequence", r.seq, "attempt", attempt, "err", leftOutError(op, entry))
}

// deliverOne queues one delivery of subscription sub; d, when not nil, is
// the Delivery for its handler, allocated with m.
func (s *Session) deliverOne(cc *clientConn, sub string, m *pigeon.Message, attempt int, d *pigeon.Delivery) {
	if m == nil || m.ID == "" {
		// Nothing to hand over or answer; the ack wait gives it back.
		s.o.logger.Warn("pigeon ws: deliver frame without a message; ignored", "sub", sub)
		return
	}
	s.mu.Lock()
	if s.cc != cc {
		// A connection the session let go (Reconnect): its deliveries
		// are left unanswered, for the server to give back as the
		// connection ends; the resumed subscription delivers them again.
		s.mu.Unlock()
		return
	}
	cs := s.bySID[sub]
	if cs != nil && cs.sidConn != cc {
		// The id of a subscription on another connection: not this
		// one's to route.
		cs = nil
	}
	s.mu.Unlock()
	if cs == nil {
		// A server subscription the client does not know (its subscribe
		// call gave up before the answer came): end it, a few at a time
		// (maxOrphanEnds), so that deliveries naming subscriptions it
		// never opened cost it no memory or goroutines without end.
		if cc.orphan(sub, true) {
			s.goBG(func() { s.unsubscribeOrphan(cc, sub) })
		}
		return
	}
	cs.mu.Lock()
	if !cs.o.AtMostOnce && len(cs.queue) >= cs.window() {
		// More deliveries unanswered than the window the client asked
		// for, which a server that keeps the window never sends: left
		// unanswered, for the server's ack wait to give back, rather
		// than queued without end.
		cs.overflow++
		n := cs.overflow
		cs.mu.Unlock()
		if n&(n-1) == 0 {
			s.o.logger.Warn("pigeon ws: deliveries beyond the subscription's window left unanswered", "subject", cs.subject, "window", cs.window(), "count", n)
		}
		return
	}
	if cs.o.AtMostOnce && len(cs.queue) > 0 && (len(cs.queue) >= maxQueued || cs.queuedN+len(m.Data) > maxQueuedBytes) {
		cs.dropped++
		n := cs.dropped
		cs.mu.Unlock()
		// Done, as at most once allows: a resumed subscription does not
		// ask for it again.
		cs.received(resumable(m.Sequence))
		if n&(n-1) == 0 { // 1, 2, 4, …: a slow handler does not flood the log
			s.o.logger.Warn("pigeon ws: at-most-once deliveries dropped: the handler does not keep up", "subject", cs.subject, "dropped", n)
		}
		return
	}
	if cs.stopping || cc.ctx.Err() != nil {
		// Unsubscribing: its unsubscribe follows once the running
		// handlers have answered, or the server already ended it.
		cs.mu.Unlock()
		return
	}
	cs.running.Add(1)
	// Read before a worker may hand m to a handler, which may edit it.
	seq := resumable(m.Sequence)
	cs.enqueue(queuedDelivery{cc: cc, sid: sub, m: m, attempt: attempt, d: d})
	cs.queuedN += len(m.Data)
	if !cs.o.AtMostOnce && seq > 0 {
		cs.outstand(seq)
	}
	cs.cond.Signal()
	cs.mu.Unlock()
	cs.received(seq)
}

// resumable is seq as a resume position: 0 (none) for the largest
// uint64, which no broker numbers and whose next (seq+1, where a resume
// starts) would be 0, a start the broker refuses.
func resumable(seq uint64) uint64 {
	if seq == math.MaxUint64 {
		return 0
	}
	return seq
}

// received notes that the message at seq (0: none) reached the
// subscription: an at-most-once pubsub subscription that resumes
// (Reconnect) starts after the highest one.
func (cs *clientSub) received(seq uint64) {
	if seq == 0 {
		return
	}
	for {
		last := cs.lastSeq.Load()
		if seq <= last || cs.lastSeq.CompareAndSwap(last, seq) {
			return
		}
	}
}

// work is one worker: it runs the handler on queued deliveries in order,
// passing over those parked behind a running handler of their message,
// until the subscription stops; what is still queued then (parked ones
// included) is dropped unanswered (see deliver).
func (cs *clientSub) work() {
	var done uint64 // the sequence last handled successfully, noted under the next lock of mu
	var ran runKey  // the message this worker last ran the handler on (with busy), let go under the next lock of mu
	for {
		cs.mu.Lock()
		if done != 0 {
			cs.handled(done)
			done = 0
		}
		if ran.id != "" {
			// A delivery of it parked meanwhile is now free: this worker
			// looks for it next, so no other needs waking.
			delete(cs.busy, ran)
			ran = runKey{}
		}
		i := -1
		for !cs.stopping {
			if i = cs.next(); i >= 0 {
				break
			}
			cs.cond.Wait()
		}
		if cs.stopping {
			n := len(cs.queue)
			clear(cs.queue)
			cs.queue, cs.queuedN = cs.queue[:0], 0
			cs.cond.Broadcast()
			cs.mu.Unlock()
			for range n {
				cs.running.Done()
			}
			return
		}
		q := cs.take(i)
		if cs.busy != nil {
			ran = runKey{q.m.ID, q.m.Sequence}
			cs.busy[ran] = struct{}{}
		}
		if len(cs.queue) > 0 {
			cs.cond.Signal() // another worker may take the next one
		}
		cs.mu.Unlock()
		// What the answer names, read before the handler runs: a handler
		// that edits its message's ID or Sequence must not make the answer
		// settle another message published under an id, nor move the
		// resume position.
		id, seq := q.m.ID, q.m.Sequence
		err := cs.call(cs.delivery(q))
		if !cs.o.AtMostOnce {
			if err == nil {
				done = resumable(seq)
			}
			cs.settle(q, id, seq, err)
		}
		cs.running.Done()
	}
}

// next is the index of the first queued delivery a worker may take, or
// -1: one whose message no handler is running on; cs.mu must be held.
func (cs *clientSub) next() int {
	if len(cs.queue) == 0 {
		return -1
	}
	if len(cs.busy) == 0 {
		return 0
	}
	for i := range cs.queue {
		if _, parked := cs.busy[runKey{cs.queue[i].m.ID, cs.queue[i].m.Sequence}]; !parked {
			return i
		}
	}
	return -1
}

// enqueue appends q to the queue; cs.mu must be held. Workers take the
// queue from its front, so it creeps along its array: once it reaches
// the end with the front half free, it moves back to the start rather
// than have append grow a new array.
func (cs *clientSub) enqueue(q queuedDelivery) {
	if len(cs.queue) == cap(cs.queue) && len(cs.queue) <= len(cs.qbuf)/2 {
		n := copy(cs.qbuf, cs.queue)
		clear(cs.qbuf[n:])
		cs.queue = cs.qbuf[:n]
	}
	grow := len(cs.queue) == cap(cs.queue)
	cs.queue = append(cs.queue, q)
	if grow {
		cs.qbuf = cs.queue[:cap(cs.queue)]
	}
}

// take removes the queued delivery at i and returns it; cs.mu must be
// held.
func (cs *clientSub) take(i int) queuedDelivery {
	q := cs.queue[i]
	if i == 0 {
		cs.queue[0] = queuedDelivery{}
		cs.queue = cs.queue[1:]
	} else {
		n := len(cs.queue) - 1
		copy(cs.queue[i:], cs.queue[i+1:])
		cs.queue[n] = queuedDelivery{}
		cs.queue = cs.queue[:n]
	}
	cs.queuedN -= len(q.m.Data)
	return q
}

// delivery returns the Delivery a handler gets for q: q.d, filled in,
// when the decoder allocated one with the message.
func (cs *clientSub) delivery(q queuedDelivery) *pigeon.Delivery {
	d := q.d
	if d == nil {
		d = new(pigeon.Delivery)
	}
	*d = pigeon.Delivery{Subject: cs.subject, Message: q.m, Attempt: q.attempt, Session: cs.s}
	return d
}

// maxOutstanding bounds what a subscription remembers to resume from:
// beyond it the lowest quarter is forgotten. Only failures the server
// stopped redelivering (exhausted) stay that long, and those are in its
// quarantine or audit already.
const maxOutstanding = 1 << 16

// outstand notes that seq was handed over; cs.mu must be held.
func (cs *clientSub) outstand(seq uint64) {
	if cs.outstanding == nil {
		cs.outstanding = make(map[uint64]struct{})
	}
	if len(cs.outstanding) >= maxOutstanding {
		seqs := slices.Sorted(maps.Keys(cs.outstanding))
		for _, s := range seqs[:len(seqs)/4] {
			delete(cs.outstanding, s)
		}
	}
	cs.outstanding[seq] = struct{}{}
}

// From is the first sequence the server subscription delivers, as its
// subscribed answer named it (0 on a work-queue or request/reply subject,
// or from a server that does not say): where a consumer that keeps its
// own position resumes when it was handed nothing yet.
func (cs *clientSub) From() uint64 {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.from
}

// handled notes that the delivery of seq was handled successfully; cs.mu
// must be held.
func (cs *clientSub) handled(seq uint64) {
	delete(cs.outstanding, seq)
	cs.lastAcked = max(cs.lastAcked, seq)
}

// resumeFrom is where a pubsub subscription resumes on the connection that
// replaces old, and drops the deliveries of old still queued, which no
// handler has been handed yet (they could no longer be answered; the
// resumed subscription delivers them again). Acknowledged, it resumes at
// the lowest sequence handed over and not handled successfully, else
// after the highest handled; at most once, after the highest received
// (dropped ones included: they were done when sent). Without either, it
// resumes where the server subscription started (its subscribed answer's
// from), so that what was published while the connection was down is not
// skipped; from a server that does not tell, as it first started.
func (cs *clientSub) resumeFrom(old *clientConn) pigeon.Start {
	cs.mu.Lock()
	start := cs.o.Start
	if cs.from > 0 {
		start = pigeon.StartAt(cs.from)
	}
	cs.mu.Unlock()
	if cs.o.AtMostOnce {
		if seq := cs.lastSeq.Load(); seq > 0 {
			return pigeon.StartAt(seq + 1)
		}
		return start
	}
	cs.mu.Lock()
	kept := cs.queue[:0]
	dropped := 0
	for _, q := range cs.queue {
		if q.cc == old {
			cs.queuedN -= len(q.m.Data)
			dropped++
			continue
		}
		kept = append(kept, q)
	}
	clear(cs.queue[len(kept):])
	cs.queue = kept
	if len(cs.outstanding) > 0 {
		start = pigeon.StartAt(slices.Min(slices.Collect(maps.Keys(cs.outstanding))))
	} else if cs.lastAcked > 0 {
		start = pigeon.StartAt(cs.lastAcked + 1)
	}
	clear(cs.outstanding) // the resumed subscription's deliveries count again
	cs.mu.Unlock()
	for range dropped {
		cs.running.Done()
	}
	return start
}

// keepResume keeps start, where a resume that did not happen (the
// connection was lost) was to start, for the next resumeFrom: it cleared
// what it was computed from.
func (cs *clientSub) keepResume(start pigeon.Start) {
	seq, ok := start.Sequence()
	if !ok || cs.o.AtMostOnce {
		return // computed again from what resumeFrom keeps
	}
	cs.mu.Lock()
	cs.outstand(seq)
	cs.mu.Unlock()
}

// call runs the handler once, recovering a panic as a failure.
func (cs *clientSub) call(d *pigeon.Delivery) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("pigeon: handler panicked: %v", p)
			cs.s.o.logger.Error("pigeon ws: handler panicked", "subject", cs.subject, "panic", p)
		}
	}()
	return cs.h(cs.hctx, d)
}

// settle answers a delivery of message id at seq (read before its handler
// ran): an ack joins the next ack frame; a failure is nacked at once, with
// the delay a pigeon.RetryAfter error asks for.
func (cs *clientSub) settle(q queuedDelivery, id string, seq uint64, handlerErr error) {
	if handlerErr == nil {
		cs.ackMu.Lock()
		cs.acks = append(cs.acks, pendingAck{cc: q.cc, sid: q.sid, id: id, seq: seq})
		cs.ackMu.Unlock()
		select {
		case cs.ackKick <- struct{}{}:
		default:
		}
		return
	}
	// The sequence names the delivery answered: never a newer message
	// published under the id once this one was trimmed.
	f := Frame{Op: OpNack, Sub: q.sid, MessageID: id, Sequence: seq}
	var re *pigeon.RetryError
	if errors.As(handlerErr, &re) && re.Delay >= 0 {
		ms := min(re.Delay, pigeon.MaxRetryDelay).Milliseconds()
		f.DelayMs = &ms
	}
	ctx, cancel := context.WithTimeout(context.Background(), cs.s.o.settleTimeout)
	defer cancel()
	if _, err := q.cc.call(ctx, jsonFrame(f), nil); err != nil {
		cs.s.o.logger.Debug("pigeon ws: nack failed", "sub", q.sid, "err", err)
	}
}

// ackLoop sends the acknowledgements: whatever gathered while the last ack
// frame was answered goes in the next one. It ends with the subscription
// once every ack is sent.
func (cs *clientSub) ackLoop() {
	for {
		select {
		case <-cs.ackKick:
		case <-cs.done:
			cs.flushAcks(cs.s.o.settleTimeout)
			return
		}
		cs.flushAcks(cs.s.o.settleTimeout)
	}
}

// flushAcks sends every pending acknowledgement, one frame per connection
// and subscription, waiting for each answer up to bound (no caller's
// context: an ack the client decided to send goes out); it returns once
// the acks that another flush was sending are answered too.
func (cs *clientSub) flushAcks(bound time.Duration) {
	cs.sendMu.Lock()
	defer cs.sendMu.Unlock()
	for {
		cs.ackMu.Lock()
		acks := cs.acks
		if len(acks) == 0 {
			cs.ackMu.Unlock()
			return
		}
		cs.acks, cs.spare = cs.spare, nil
		cs.ackMu.Unlock()
		sent := acks
		for len(acks) > 0 {
			n, size, limit := 1, ackCost(acks[0].id), acks[0].cc.pq.frameBytes()
			for n < len(acks) && acks[n].cc == acks[0].cc && acks[n].sid == acks[0].sid {
				if size += ackCost(acks[n].id); size > limit {
					break // the rest go in the next frame
				}
				n++
			}
			cs.sendAcks(bound, acks[:n])
			acks = acks[n:]
		}
		clear(sent)
		cs.ackMu.Lock()
		cs.spare = sent[:0]
		cs.ackMu.Unlock()
	}
}

// ackCost is at most what an ack of the message id adds to an ack frame:
// the id, escaped as encoding/json escapes it (a byte it escapes takes up
// to six), and its sequence.
func ackCost(id string) int {
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return 6*len(id) + 32
		}
	}
	return len(id) + 32
}

// sendAcks sends one ack frame of acks, all of one connection and
// subscription, and waits for its answer.
func (cs *clientSub) sendAcks(bound time.Duration, acks []pendingAck) {
	// Each id goes with the sequence its delivery had: an ack never
	// settles a newer message published under the id once the one
	// answered was trimmed.
	sub := acks[0].sid
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	a, err := acks[0].cc.call(ctx, ackFrame(sub, acks), nil)
	if err != nil {
		cs.s.o.logger.Debug("pigeon ws: ack failed", "sub", sub, "count", len(acks), "err", err)
		return
	}
	if len(a.NotPending) > 0 {
		cs.s.o.logger.Debug("pigeon ws: acks of deliveries no longer pending", "sub", sub, "count", len(a.NotPending))
	}
}

// ackFrame renders the ack frame of acks, all of subscription sub, byte
// for byte as encoding/json renders its Frame, without reflection (an ack
// frame goes out for every delivery handled, or every few): sequence
// (none when 0) and messageId for one, messageIds and sequences for more.
func ackFrame(sub string, acks []pendingAck) func(b []byte, id string) []byte {
	return func(b []byte, id string) []byte {
		b = append(b, `{"op":"ack","id":`...)
		b = jsontext.AppendString(b, id)
		b = append(b, `,"sub":`...)
		b = jsontext.AppendString(b, sub)
		if len(acks) == 1 {
			if acks[0].seq != 0 {
				b = append(b, `,"sequence":`...)
				b = strconv.AppendUint(b, acks[0].seq, 10)
			}
			b = append(b, `,"messageId":`...)
			b = jsontext.AppendString(b, acks[0].id)
			return append(b, '}')
		}
		b = append(b, `,"messageIds":[`...)
		for i, a := range acks {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsontext.AppendString(b, a.id)
		}
		b = append(b, `],"sequences":[`...)
		for i, a := range acks {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, a.seq, 10)
		}
		return append(b, "]}"...)
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
