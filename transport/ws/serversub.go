package ws

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"pigeon"
	"pigeon/internal/jsontext"
	"pigeon/internal/wire"
)

// serverSub is the server side of one WebSocket subscription: an engine
// subscription whose asynchronous handler pushes each delivery to the
// client as a deliver frame and returns at once. Up to the subscription's
// window of deliveries are on the wire unanswered; each is settled when the
// client acks or nacks it (one by one or many per frame), when its ack wait
// passes, or when the subscription or the connection ends. An
// at-most-once subscription settles each delivery as soon as its frame is
// queued. Leases, redelivery, backoff and exhaustion all stay the
// engine's.
type serverSub struct {
	c       *conn
	caller  pigeon.Caller // whose subscription: data read again is read as theirs
	ackWait time.Duration
	atMost  bool
	sub     pigeon.Subscription
	id      string
	readyCh chan struct{}
	ended   atomic.Bool // ended by the client or the connection: no push
	sweep   sync.Once
	// refused is the contract's refusal a delivery met when its data was
	// read again (storedData), once the engine's subscription, waiting on
	// this connection's write budgets, had not itself seen it: nil until
	// then. The subscription is then cut as the engine would have cut it.
	refused atomic.Pointer[error]

	mu      sync.Mutex
	pending map[string]inflight // by message id
	dones   []func(error)       // settleAll's buffer, between ack frames
	swept   sweptSet            // deliveries that left pending unanswered

	// A subscription whose client takes deliver_batch frames gathers its
	// deliveries until the engine flushes (see handleBatched).
	batch bool
	bmu   sync.Mutex
	hctx  context.Context // the handler's context, once it has run
	buf   []byte          // the deliver_batch frame being gathered, nil when none
	bufW  *wireState      // its wire state, shared by its entries' pending
	bufT  time.Time       // the deadline of its entries' answers
	bufP  *[]byte         // buf's holder from frameBufs
	bufN  int64           // the write budget its entries hold
	bufIn []gathered
	last  int // the length of the last frame, to size the next
}

// frameBufs holds the buffers of deliver_batch frames the writer is done
// with (*[]byte, empty), for the next frames to gather in: a busy
// subscription does not allocate and clear a buffer for each frame.
// Buffers above maxPooledFrame are left to the collector.
var frameBufs sync.Pool

const maxPooledFrame = 2 * maxDeliverBatchBytes

// getFrameBuf returns a holder of an empty buffer of at least size bytes.
func getFrameBuf(size int) *[]byte {
	if p, _ := frameBufs.Get().(*[]byte); p != nil {
		if cap(*p) >= size {
			return p
		}
		*p = make([]byte, 0, size) // the holder serves again
		return p
	}
	b := make([]byte, 0, size)
	return &b
}

// putFrameBuf gives p back holding b, the frame gathered in it (append
// may have moved it), once nothing refers to b; a nil p does nothing.
func putFrameBuf(p *[]byte, b []byte) {
	if p == nil || cap(b) > maxPooledFrame {
		return
	}
	*p = b[:0]
	frameBufs.Put(p)
}

// gathered is one delivery waiting in a batch.
type gathered struct {
	id   string
	done func(error)
}

// Bounds of one deliver_batch frame.
const (
	maxDeliverBatch      = 64
	maxDeliverBatchBytes = 256 << 10
)

// inflight is one delivery on its way to the client or on the wire,
// waiting for the client's answer.
type inflight struct {
	done     func(error)
	deadline time.Time
	wire     *wireState // whether its frame went to the socket
	seq      uint64     // the sequence of the message handed over
	// reused: it took the place of a delivery of another message under
	// the same id (see wait); an answer that names no sequence is not
	// taken for it.
	reused bool
}

// answers reports whether an answer naming seq (0: none) is one to f: a
// sequence must be f's, and an answer without one is taken only while
// the id names one message on the subscription.
func (f inflight) answers(seq uint64) bool {
	if seq == 0 {
		return !f.reused
	}
	return seq == f.seq
}

var (
	errNacked  = errors.New("ws: the client nacked the delivery")
	errAckWait = errors.New("ws: the client did not answer within the ack wait")
	// errUnsubscribed: the client unsubscribed before answering.
	errUnsubscribed = errors.New("ws: the client unsubscribed before answering")
	// errLeaseLost: the cluster lost the delivery's lease before the
	// client answered (leaseLost).
	errLeaseLost = errors.New("ws: the delivery's cluster lease was lost before the client answered")
)

func newServerSub(c *conn, caller pigeon.Caller, ackWait time.Duration, atMost bool) *serverSub {
	return &serverSub{c: c, caller: caller, ackWait: ackWait, atMost: atMost, readyCh: make(chan struct{}), pending: map[string]inflight{}}
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
	refused := ss.refusal()
	if ss.ended.Load() && refused == nil {
		return
	}
	b := appendHead(make([]byte, 0, 128), OpUnsubscribed, "")
	b = append(b, `,"sub":`...)
	b = jsontext.AppendString(b, ss.id)
	err := ss.sub.Err()
	if err == nil {
		err = refused
	}
	if err != nil {
		we := wire.Encode(err)
		b = append(b, `,"error":{"code":`...)
		b = jsontext.AppendString(b, string(we.Code))
		b = append(b, `,"message":`...)
		b = jsontext.AppendString(b, we.Message)
		b = append(b, `,"details":{}}`...)
	}
	_ = c.send(c.ctx, append(b, '}'))
}

// cut reports whether the engine ended the subscription because its
// contract no longer allows it to receive (revoked, expired, a role taken
// away, its policy changed, the subject gone from it): a deliver frame of
// it still waiting in the write queue is then dropped, not written after
// the moment the contract stopped allowing it. The engine ends the
// subscription as the revocation happens (Engine.RevokeContract), and a
// slow reader may leave frames queued for seconds.
//
// The engine ends it at once for a revocation or an expiry; a grant
// revoked, a role taken away or a policy changed it sees at its next
// look at the contract, which waits while a delivery waits for room in
// this connection's write budgets. That delivery reads its data again
// (storedData), through the contract: a refusal there cuts the
// subscription too (refused), so that a slow reader is not written the
// rest of its queue after the moment the contract stopped allowing it.
func (ss *serverSub) cut() bool {
	return ss.refused.Load() != nil || contractRefusal(ss.sub.Err())
}

// contractRefusal reports whether err says that a contract no longer
// allows its holder to receive on the subject.
func contractRefusal(err error) bool {
	if err == nil {
		return false
	}
	switch pigeon.ErrorCode(err) {
	case pigeon.CodeContractRevoked, pigeon.CodeContractExpired, pigeon.CodeContractNotFound,
		pigeon.CodeContractPrincipalMismatch, pigeon.CodeContractStale, pigeon.CodeGrantRevoked,
		pigeon.CodeSubjectNotInContract, pigeon.CodeOperationNotInContract, pigeon.CodeSubjectNotFound:
		return true
	}
	return false
}

// refusal is the contract's refusal storedData met, or nil.
func (ss *serverSub) refusal() error {
	if p := ss.refused.Load(); p != nil {
		return *p
	}
	return nil
}

// end stops the subscription (idempotent) and waits for its handlers.
func (ss *serverSub) end() {
	ss.ended.Store(true)
	ss.unsubscribe()
}

// unsubscribe stops the engine subscription and waits for the handlers.
func (ss *serverSub) unsubscribe() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = ss.sub.Unsubscribe(ctx)
	<-ss.sub.Done()
}

// handle is the engine's asynchronous handler of the subscription. A
// delivery that never went out (the subscription or connection is ending,
// the write queue is stalled, the connection ended while its frame waited
// in the write queue) is ErrUndelivered: back to the group at once, no
// attempt spent. One that went out waits in pending for the client's
// answer; see settle and sweeper.
func (ss *serverSub) handle(ctx context.Context, d *pigeon.Delivery, done func(error)) {
	select {
	case <-ss.readyCh:
	case <-ctx.Done():
		done(undelivered(ctx.Err()))
		return
	}
	if ss.ended.Load() || ss.c.ctx.Err() != nil {
		// A redelivery of what the end of the connection gave back may
		// come here before the subscription is ended: it never goes out.
		done(undelivered(errGone))
		return
	}
	ss.sweep.Do(func() { ss.c.goBG(func() { ss.sweeper(ctx) }) })
	id, seq := d.Message.ID, d.Message.Sequence
	if ss.batch && ss.handleBatched(ctx, d, done, id) {
		return
	}
	b, n, err := ss.frame(ctx, d)
	if pigeon.ErrorCode(err) == pigeon.CodeMessageNotFound {
		done(nil) // trimmed by retention while it waited: nothing left to deliver
		return
	}
	if contractRefusal(err) {
		// The contract stopped allowing the subscription while the
		// delivery waited for room: what waits in the write queue is cut
		// (see cut), and the client is told why (watch).
		refusal := err
		ss.refused.CompareAndSwap(nil, &refusal)
	}
	var w *wireState
	if err == nil && !ss.atMost {
		// Pending before it is queued: the answer may come at once.
		w = new(wireState)
		ss.wait(id, inflight{done: done, deadline: time.Now().Add(ss.ackWait), wire: w, seq: seq})
	}
	if err == nil {
		err = ss.c.enqueueFor(ctx, b, n, ss, w)
	}
	if err != nil {
		// A delivery that never got its frame (no room before the
		// subscription or the connection ended, the connection stalled,
		// its data refused) was never pending: it is settled here, or the
		// engine's subscription would wait for it for ever, and the end
		// of the connection with it.
		if w != nil && !ss.take(id) {
			return // settled meanwhile (the connection ended)
		}
		if ctx.Err() == nil {
			// This consumer cannot take deliveries any more: stop
			// competing for them, or the group would hand them straight
			// back to it. (An engine subscription that is ending tells
			// the client why itself.)
			ss.stop()
		}
		done(undelivered(err))
		return
	}
	if ss.atMost {
		done(nil)
	}
}

// handleBatched adds d to the batch being gathered when the write budgets
// have room for it now, and reports whether it did. When they have not,
// the batch leaves first (its bytes count against the budgets) and d goes
// on its own, waiting for room as a deliver frame does.
func (ss *serverSub) handleBatched(ctx context.Context, d *pigeon.Delivery, done func(error), id string) bool {
	n := int64(len(d.Message.Data)) + frameOverhead
	ss.bmu.Lock()
	defer ss.bmu.Unlock()
	ss.hctx = ctx
	if !ss.c.tryReserve(n) {
		ss.flushLocked()
		return false
	}
	if len(ss.bufIn) > 0 && ss.bufW.withheld() {
		ss.flushLocked() // an ack wait withheld the frame gathered so far: start another
	}
	if len(ss.bufIn) == 0 {
		// The frame is handed to the writer when it leaves: a buffer
		// for each batch, so an idle subscription holds none; the
		// writer gives it back to frameBufs once it is written.
		ss.bufP = getFrameBuf(max(ss.last+ss.last/4, 1024))
		b := appendHead(*ss.bufP, OpDeliverBatch, "")
		b = append(b, `,"sub":`...)
		b = jsontext.AppendString(b, ss.id)
		ss.buf = append(b, `,"deliveries":[`...)
		if !ss.atMost {
			ss.bufW = new(wireState)
			// One clock read for the batch: its deliveries' ack waits
			// run from when it began to gather.
			ss.bufT = time.Now().Add(ss.ackWait)
		}
	} else {
		ss.buf = append(ss.buf, ',')
	}
	if !ss.atMost {
		ss.wait(id, inflight{done: done, deadline: ss.bufT, wire: ss.bufW, seq: d.Message.Sequence})
	}
	ss.buf = append(ss.buf, `{"attempt":`...)
	ss.buf = strconv.AppendInt(ss.buf, int64(d.Attempt), 10)
	ss.buf = append(ss.buf, `,"message":`...)
	ss.buf = append(d.AppendMessageJSON(ss.buf), '}')
	// The frame so far, and its closing "]}", within what it holds.
	ss.bufN += ss.c.holdAll(len(ss.buf)+2-int(ss.bufN), n)
	ss.bufIn = append(ss.bufIn, gathered{id, done})
	if len(ss.bufIn) >= maxDeliverBatch || len(ss.buf) >= maxDeliverBatchBytes {
		ss.flushLocked()
	}
	return true
}

// flush sends the batch gathered so far; the engine calls it whenever it
// stops handing deliveries over (pigeon.WithFlush).
func (ss *serverSub) flush() {
	ss.bmu.Lock()
	defer ss.bmu.Unlock()
	ss.flushLocked()
}

// flushLocked sends the gathered batch as one deliver_batch frame. When
// it cannot be queued, every delivery in it is given back as never sent.
func (ss *serverSub) flushLocked() {
	if len(ss.bufIn) == 0 {
		return
	}
	b := append(ss.buf, "]}"...)
	in, n, w, p, ctx := ss.bufIn, ss.bufN, ss.bufW, ss.bufP, ss.hctx
	ss.buf, ss.bufN, ss.bufW, ss.bufP, ss.last = nil, 0, nil, nil, len(b)
	err := ss.c.enqueueOut(ctx, outFrame{b: b, n: n, sub: ss, wire: w, buf: p})
	for _, g := range in {
		switch {
		case err == nil && ss.atMost:
			g.done(nil)
		case err == nil:
		case ss.atMost || ss.take(g.id):
			g.done(undelivered(err))
		}
	}
	clear(in)
	ss.bufIn = in[:0]
	if err != nil && ctx.Err() == nil {
		ss.stop() // as handle does: this consumer cannot take deliveries
	}
}

// wait makes f the delivery of id waiting for the client's answer. One of
// the same id that still waits (its message trimmed in flight and another
// published under its id, or a redelivery racing the sweep of its ack
// wait) is settled as an ack wait that passed: replaced unsettled, it
// would hold its slot in the engine's subscription for ever. When it was
// of another message (another sequence), f is marked reused: a late
// answer to the old delivery that names no sequence (a v1 client's)
// cannot be told from an answer to f, and is not taken for f, which goes
// back after its ack wait instead of being settled by an answer to
// another message. An answer naming f's sequence settles it.
//
// The same holds once the old delivery has left pending unanswered (its
// ack wait swept it, or f's predecessor replaced it): its late answer
// may still come. The subscription remembers the last maxSwept such
// deliveries (swept), and f is marked reused when one of them was of
// its id at another sequence.
func (ss *serverSub) wait(id string, f inflight) {
	ss.mu.Lock()
	old, had := ss.pending[id]
	if had {
		ss.swept.add(id, old.seq)
		f.reused = old.reused
	}
	f.reused = f.reused || ss.swept.other(id, f.seq)
	ss.pending[id] = f
	ss.mu.Unlock()
	if had {
		old.done(errAckWait)
	}
}

// take removes id from pending and reports whether it was there.
func (ss *serverSub) take(id string) bool {
	ss.mu.Lock()
	_, ok := ss.pending[id]
	delete(ss.pending, id)
	ss.mu.Unlock()
	return ok
}

// sweeper fails the deliveries whose ack wait passed, and every delivery
// still pending when the subscription (ctx) or the connection ends. A
// delivery whose frame the writer never began writing (it waited in the
// write queue, or in a batch being gathered) is withheld from the writer
// from then on, so that the client never sees a delivery it can no
// longer answer, and, when its subscription or connection ends, goes
// back uncounted. Otherwise:
//   - an ack wait that passed spends the attempt, whether or not the
//     frame was written;
//   - the end of the connection or of the engine's subscription gives it
//     back at once as a spent attempt (the client may have seen it);
//   - when the client unsubscribed first, it goes back uncounted (the Go
//     client leaves unanswered only what no handler saw).
func (ss *serverSub) sweeper(ctx context.Context) {
	tick := time.NewTicker(min(max(ss.ackWait/4, 10*time.Millisecond), time.Second))
	defer tick.Stop()
	for {
		select {
		case now := <-tick.C:
			ss.sweepDue(now)
			continue
		case <-ctx.Done():
		case <-ss.c.ctx.Done():
		}
		var outcome func(inflight) error
		switch {
		case ss.c.ctx.Err() != nil:
			outcome = settleAs(pigeon.RetryAfter(0, errGone), undelivered(errGone))
		case ss.ended.Load() && ss.refused.Load() == nil:
			outcome = settleAs(undelivered(errUnsubscribed), undelivered(errUnsubscribed))
		default:
			outcome = settleAs(pigeon.RetryAfter(0, ctx.Err()), undelivered(ctx.Err()))
		}
		for {
			// Deliveries racing with the end register after a first pass.
			if ss.expire(func(inflight) bool { return true }, outcome, false) == 0 {
				select {
				case <-ss.sub.Done():
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}
	}
}

// sweepDue fails, as an ack wait that passed, the deliveries whose ack
// wait ends by now, remembering each (swept): its answer may come late.
func (ss *serverSub) sweepDue(now time.Time) {
	ss.expire(func(f inflight) bool { return !now.Before(f.deadline) }, settleAs(errAckWait, errAckWait), true)
}

// settleAs is the outcome of a pending delivery: unsent when its frame
// was never written, which withholds it from the writer for good, and
// sent otherwise.
func settleAs(sent, unsent error) func(inflight) error {
	return func(f inflight) error {
		if f.wire.drop() {
			return unsent
		}
		return sent
	}
}

// expire fails the pending deliveries that match, each with its outcome,
// and says how many it failed. With remember, each is kept in swept: the
// client may still answer it, late.
func (ss *serverSub) expire(match func(inflight) bool, outcome func(inflight) error, remember bool) int {
	var due []inflight
	ss.mu.Lock()
	for id, f := range ss.pending {
		if match(f) {
			due = append(due, f)
			delete(ss.pending, id)
			if remember {
				ss.swept.add(id, f.seq)
			}
		}
	}
	ss.mu.Unlock()
	for _, f := range due {
		f.done(outcome(f))
	}
	return len(due)
}

// leaseLost takes the delivery of id at seq out of pending when the
// cluster reports its lease lost (pigeon.WithLeaseLost): it ran out while
// the node was cut off or stalled, and another node may run the message.
// Its answer would settle nothing; the client's, when it comes, finds no
// delivery waiting and is refused ACK_NOT_ALLOWED (or named in
// notPending), as an answer after the ack wait is. The delivery is
// remembered as one swept (its late answer may name no sequence), and
// settled now. A frame still in the write queue is written all the same:
// it may carry other deliveries.
func (ss *serverSub) leaseLost(id string, seq uint64) {
	ss.mu.Lock()
	f, ok := ss.pending[id]
	if ok = ok && f.seq == seq; ok {
		delete(ss.pending, id)
		ss.swept.add(id, seq)
	}
	ss.mu.Unlock()
	if ok {
		f.done(errLeaseLost)
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
	n := int64(len(m.Data)) + frameOverhead
	if ss.c.tryReserve(n) {
		// The message's encoding is shared by every subscriber it goes to.
		b := appendDeliverHead(make([]byte, 0, n), ss.id, d.Attempt)
		b = append(d.AppendMessageJSON(b), '}')
		return b, ss.c.holdAll(len(b), n), nil
	}
	d.Message = nil
	{
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
	b := encodeDeliver(make([]byte, 0, n), ss.id, m, d.Attempt)
	return b, ss.c.holdAll(len(b), n), nil
}

// frameOverhead is what a deliver frame adds to the message data, at most
// for all but unusually long envelope fields: those a publisher sets may
// take 256 bytes each (512 for reason), six times that once escaped (a
// '<' is written \u003c), so a frame that comes out larger than its
// reservation takes the rest too (conn.holdAll).
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

// answer is a client's ack (ok) or nack, with the nack's delay (< 0: the
// subject's backoff).
type answer struct {
	ok    bool
	delay time.Duration
}

// settle hands the client's answer to the delivery of id at seq (0: the
// one of id, see inflight.answers) waiting for it; it reports whether one
// was waiting. One that is not answered stays pending.
func (ss *serverSub) settle(id string, seq uint64, a answer) bool {
	ss.mu.Lock()
	f, ok := ss.pending[id]
	if ok = ok && f.answers(seq); ok {
		delete(ss.pending, id)
	}
	ss.mu.Unlock()
	if !ok {
		return false
	}
	f.done(a.err())
	return true
}

// settleAll hands the client's answer to the deliveries of ids, at seqs
// (nil, or one per id; 0: none named), and of id at seq (when id is not
// empty), taking them out of pending under one lock; it returns the ids
// no delivery waited for (see settle) and, in step, the sequence each
// answer named (0: none). The read loop calls it, one ack frame at a
// time: the dones it gathers go in a buffer it reuses.
func (ss *serverSub) settleAll(ids []string, seqs []uint64, id string, seq uint64, a answer) (stale []string, staleSeqs []uint64) {
	ss.mu.Lock()
	dones := ss.dones[:0]
	take := func(id string, seq uint64) {
		if f, ok := ss.pending[id]; ok && f.answers(seq) {
			delete(ss.pending, id)
			dones = append(dones, f.done)
		} else {
			stale = append(stale, id)
			staleSeqs = append(staleSeqs, seq)
		}
	}
	for i, id := range ids {
		if id != "" {
			var seq uint64
			if i < len(seqs) {
				seq = seqs[i]
			}
			take(id, seq)
		}
	}
	if id != "" {
		take(id, seq)
	}
	ss.dones = nil // a settleAll of another ack frame meanwhile takes a buffer of its own
	ss.mu.Unlock()
	for _, done := range dones {
		done(a.err()) // a nack's error of its own for each delivery
	}
	clear(dones)
	ss.mu.Lock()
	ss.dones = dones[:0]
	ss.mu.Unlock()
	return stale, staleSeqs
}

// err is what a delivery's done is given for the answer.
func (a answer) err() error {
	switch {
	case a.ok:
		return nil
	case a.delay >= 0:
		return pigeon.RetryAfter(a.delay, errNacked)
	}
	return errNacked
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
