package pigeon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"pigeon/internal/cond"
	"pigeon/store"
)

// liveQueue is how many messages a live pubsub subscriber may have waiting
// before it falls back to catching up on its own; liveQueueBytes bounds
// their size (decoded.size), unless the queue holds one message only.
const (
	liveQueue      = 1024
	liveQueueBytes = 16 << 20
)

// ackRecordDelay is the longest an acknowledgement waits for its range
// record while the subscription is idle.
const ackRecordDelay = 100 * time.Millisecond

// maxBatch is the most messages one delivery batch holds. A batch is
// checked against the contract once, before any of it is handed over, and
// recorded in the audit log once.
const maxBatch = 256

type subscription struct {
	id string
	// leaseHolder holds its work-queue leases: pushHolder and id (holder).
	leaseHolder string
	e           *Engine
	sess        Session
	caller      Caller
	subj        *subject
	opts        SubscribeOptions
	sel         Selector
	filter      *cond.Condition
	group       string
	g           *group       // the group's state, held from subscribe until finish (nil on pubsub)
	h           Handler      // a synchronous handler, adapted to ah
	ah          AsyncHandler // the handler of a transport (nil: h)
	atMost      bool         // at-most-once: no acknowledgements, no redelivery
	scope       *permit      // the contract's permit on the subject: its receive scope applies
	k           *contract    // the contract it runs under: it ends when that expires (nil: never)
	ctx         context.Context
	cancel      context.CancelFunc
	hctx        context.Context // ctx, marked as the handlers' (handlerOf)
	done        chan struct{}
	wake        chan struct{}
	slots       chan struct{}
	running     sync.WaitGroup
	errMu       sync.Mutex
	err         error
	stopped     atomic.Bool

	// While the group's cluster leases are extended (Engine.extends),
	// what tells each delivery handed over and not yet answered that its
	// lease was lost, by sequence (track, loseLeases): its handler's
	// context is cancelled, or SubscribeOptions.LeaseLost is called.
	lostMu sync.Mutex
	onLost map[uint64]func()

	// Outcomes reported by the handler, taken by the loop: acknowledged
	// messages to record, refusals (and the redeliveries that follow
	// them) to record, work-queue outcomes to settle in the store. The loop records them after the dispatch
	// record of what it handed over (sent), so that the audit log tells
	// each message's story in order: handed over, then answered.
	resMu    sync.Mutex
	nAnswers atomic.Int32 // entries in acked and held: at maxBatch the loop records them
	acked    deliveryLog
	held     []store.AuditRecord // delivery.nacked, delivery.exhausted and a pub/sub redelivery's delivery.dispatched, in the order they happened
	settles  []outcome
	resWake  chan struct{}
	spare    deliveryLog // the loop's: acked is swapped with it to record
	sent     deliveryLog // the loop's: what the batch being handed over holds

	// pubsub: messages pushed by the subject's fan-out while live.
	queue       chan *decoded
	queuedBytes atomic.Int64 // the size of what queue holds
	lagging     atomic.Bool
	cursor      uint64 // next sequence to deliver (owned by the loop)
	from        uint64 // the cursor the subscription started at
	// emptyBehind: the loop's last store read found nothing though the
	// fan-out stood past its cursor.
	emptyBehind bool
	batch       []*decoded  // the loop's batch buffer
	idle        *time.Timer // the loop's: ackRecordDelay while it idles
}

// outcome is a handler's answer to one work-queue delivery.
type outcome struct {
	d   *decoded
	err error
}

var subSeq atomic.Uint64

func (s *subscription) ID() string { return s.id }

// From is the first sequence a pubsub subscription delivers: where its
// Start stood when it subscribed (0 on other subjects). A transport tells
// its client, so that a client resuming after a lost connection can ask
// for everything from there, even when it was handed nothing before.
func (s *subscription) From() uint64          { return s.from }
func (s *subscription) Done() <-chan struct{} { return s.done }
func (s *subscription) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

func (s *subscription) Unsubscribe(ctx context.Context) error {
	s.stop(nil)
	if ctx.Value(handlerOf{}) == s {
		// Called from one of its own handlers, with the handler's
		// context: the subscription ends once that handler returns, so
		// waiting for the end here would wait for the caller.
		return nil
	}
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// handlerOf is the key of the value a subscription's handler context
// carries: the subscription, so that an Unsubscribe from its own handler
// does not wait for itself.
type handlerOf struct{}

// stop ends the subscription with err (nil for a plain unsubscribe).
func (s *subscription) stop(err error) {
	if s.stopped.Swap(true) {
		return
	}
	s.errMu.Lock()
	s.err = err
	s.errMu.Unlock()
	s.cancel()
}

func (s *subscription) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run is the subscription's delivery loop.
func (s *subscription) run() {
	defer s.finish()
	defer s.endAtExpiry()()
	defer s.survive("delivery loop")
	if s.subj.mode == ModePubSub {
		s.runPubSub()
	} else {
		s.runGroup()
	}
}

// endAtExpiry stops the subscription with CONTRACT_EXPIRED at the instant
// its contract expires, whatever it is doing then: idle, waiting for window
// room or for a handler. Without it an idle subscription would learn of the
// expiry only at its next delivery, and a transport would still hold it
// live, its queued frames with it. Ending its context at the expiry is
// what RevokeContract does at a revocation. A renewal (RenewContract)
// moves the expiry later: the timer, when it fires, waits out what is
// left. It returns the func that disarms it.
func (s *subscription) endAtExpiry() (disarm func()) {
	if s.k == nil {
		return func() {}
	}
	var (
		mu    sync.Mutex
		t     *time.Timer
		ended bool
		fire  func()
	)
	fire = func() {
		// The timer counts on the monotonic clock, the contract on
		// Options.Now: a timer that fires early waits out what is left.
		now := s.e.now()
		if left := s.k.expiresAt().Sub(now); left > 0 || s.e.renewedElsewhere(s.ctx, s.k, now) {
			left = max(s.k.expiresAt().Sub(now), time.Millisecond)
			mu.Lock()
			if !ended {
				t = time.AfterFunc(left, fire)
			}
			mu.Unlock()
			return
		}
		s.stop(NewError(CodeContractExpired, "the contract has expired"))
	}
	mu.Lock()
	t = time.AfterFunc(s.k.expiresAt().Sub(s.e.now()), fire)
	mu.Unlock()
	return func() {
		mu.Lock()
		ended = true
		t.Stop()
		mu.Unlock()
	}
}

func (s *subscription) finish() {
	s.stop(nil)
	s.running.Wait()
	s.flush() // what was answered before the end is recorded and settled
	e := s.e
	e.subs.mu.Lock()
	e.subs.remove(s)
	if f := e.subs.fanouts[s.subj.name]; f != nil {
		f.remove(s)
	}
	e.subs.mu.Unlock()
	if s.g != nil {
		e.releaseLeases(s)
		e.releaseGroup(s.g) // an idle group leaves memory with its last subscriber
	}
	rec := EventSubscriptionStopped.record("", CodeOK, store.AuditRecord{Subject: s.subj.name, Principal: s.caller.Principal.ID, ContractID: s.caller.ContractID, Ref: s.id})
	if err := s.Err(); err != nil {
		rec.Outcome, rec.Code = string(OutcomeDeny), string(ErrorCode(err))
	}
	e.audit(context.Background(), rec)
	close(s.done)
}

// auditPause is how often a subscription paused by an audit log that
// cannot be written probes it again.
const auditPause = 100 * time.Millisecond

// behindPause is how often a subscription paused by an access directory
// that is behind (a cluster node that cannot read another node's change,
// or is no longer vouched for) checks again, unless woken sooner: the
// engine wakes every subscription when the directory catches up.
const behindPause = 100 * time.Millisecond

// checkDelivery re-checks the contract and receive rule before each
// delivery and redelivery; a failure stops the subscription.
// While the audit log cannot be written it waits: nothing is delivered
// without its evidence, and the subscription goes on once the log is
// whole. While the access directory is behind (a cluster node's
// directory that may not hold another node's change) it waits too:
// nothing is delivered on a directory that may be stale, and once it has
// caught up the contract is judged on it, as on any wake-up. A change
// that took its access away then ends the subscription (GRANT_REVOKED,
// say); otherwise it goes on from where it was, and what was published
// meanwhile follows. The wait ends with the subscription (Unsubscribe,
// the contract's expiry or revocation, Shutdown).
func (s *subscription) checkDelivery() bool {
	for {
		for s.e.auditGuard(s.ctx) != nil {
			select {
			case <-s.ctx.Done():
				return false
			case <-time.After(auditPause):
			}
		}
		cur := s.e.subject(s.subj.name)
		_, code, reason := s.e.checkContract(s.ctx, s.caller.ContractID, s.caller.Principal, cur, OpReceive)
		if code == CodeOK {
			return true
		}
		if !s.e.refusedBehind(code, reason) {
			s.stop(NewError(code, "%s", reason))
			return false
		}
		select {
		case <-s.ctx.Done():
			return false
		case <-s.wake: // the directory caught up, or access changed
		case <-time.After(behindPause):
		}
	}
}

// refusedBehind reports whether a contract's check refused with code and
// reason because the access directory is behind: it refused
// STORE_UNAVAILABLE on that ground, or the directory fell behind while
// the check read it (a role permission then grants nothing, and the check
// finds it gone, GRANT_REVOKED). Such a refusal says nothing of the
// contract itself: it is judged again once the directory has caught up.
func (e *Engine) refusedBehind(code Code, reason string) bool {
	switch code {
	case CodeStoreUnavailable:
		return reason == behindText || reason == doubtText || e.dir.isBehind()
	case CodeGrantRevoked:
		return e.dir.isBehind()
	}
	return false
}

// matches reports whether the message's data matches the selector.
func (s *subscription) matches(d *decoded) bool {
	return len(s.sel.terms) == 0 || s.sel.Match(d.value())
}

// selects reports whether the message passes the subscription's receive
// scope and filter.
func (s *subscription) selects(d *decoded) bool {
	if s.scope.scoped(OpReceive) && !s.scope.inScope(OpReceive, d.value()) {
		return false
	}
	if s.filter == nil {
		return true
	}
	v := condVars(s.caller.Principal, d.m, d.condValue())
	ok, err := s.filter.Eval(&v)
	return err == nil && ok
}

// base is the start of the subscription's audit records.
func (s *subscription) base() store.AuditRecord {
	return store.AuditRecord{Subject: s.subj.name, Principal: s.caller.Principal.ID, ContractID: s.caller.ContractID, PolicyID: s.subj.policyID, Ref: s.id}
}

// transientWait is how long a subscription waits before it reads again
// after a transient store failure.
const transientWait = 250 * time.Millisecond

// transient reports whether err is a store failure that clears by itself:
// a replicated store that lost its quorum for a moment. A subscription
// waits and reads again rather than stop.
func transient(err error) bool { return ErrorCode(err) == CodeStoreNoQuorum }

// runPubSub delivers in sequence order, in batches: from the store while
// behind, from the fan-out's queue while live.
func (s *subscription) runPubSub() {
	f := s.e.fanoutOf(s.subj.name)
	for s.ctx.Err() == nil {
		if s.nAnswers.Load() >= maxBatch {
			s.flush()
		}
		batch, ok := s.nextBatch(f)
		if !ok {
			return
		}
		if len(batch) > 0 {
			s.deliverBatch(batch)
		}
	}
}

// take adds d to the batch unless it was delivered already.
func (s *subscription) take(d *decoded) {
	s.queuedBytes.Add(-d.size)
	if d.seq < s.cursor {
		return
	}
	s.batch = append(s.batch, d)
	s.cursor = d.seq + 1
}

// nextBatch waits for the next messages to deliver, up to maxBatch. It
// returns an empty batch when it woke for something else, and false when
// the subscription ends.
func (s *subscription) nextBatch(f *fanout) ([]*decoded, bool) {
	s.batch = s.batch[:0]
	if !s.lagging.Load() {
		var later <-chan time.Time
		select {
		case d := <-s.queue:
			s.take(d)
			goto more
		default:
		}
		// Idle: record what was acknowledged, then wait; answers that
		// come in meanwhile are recorded after ackRecordDelay at most.
		s.flush()
		// An answer may have come in since the flush, its slot freed
		// already: it is still recorded after ackRecordDelay.
		if len(s.slots) > 0 || s.nAnswers.Load() > 0 {
			// One timer, reset each time: since Go 1.23 a reset timer
			// never delivers a value from before the reset.
			if s.idle == nil {
				s.idle = time.NewTimer(ackRecordDelay)
			} else {
				s.idle.Reset(ackRecordDelay)
			}
			later = s.idle.C
		}
		select {
		case d := <-s.queue:
			s.take(d)
		case <-s.wake:
			return nil, s.checkDelivery()
		case <-s.resWake:
			return nil, true
		case <-later:
			return nil, true
		case <-s.ctx.Done():
			return nil, false
		}
	more:
		for len(s.batch) < maxBatch {
			select {
			case d := <-s.queue:
				s.take(d)
			default:
				return s.batch, true
			}
		}
		return s.batch, true
	}
	// Behind: first what the queue still holds, then the store.
	for len(s.batch) < maxBatch {
		select {
		case d := <-s.queue:
			s.take(d)
			continue
		default:
		}
		break
	}
	if len(s.batch) > 0 {
		return s.batch, true
	}
	// Then what the recent cache still holds, as the fan-out reads it:
	// no copy out of the store, no decoding.
	e := s.e
	ring := f.recent()
	for high := f.high.Load(); len(s.batch) < maxBatch && s.cursor <= high; s.cursor++ {
		d := ring.at(s.cursor)
		if d == nil {
			break
		}
		if s.matches(d) {
			s.batch = append(s.batch, d)
		}
	}
	if len(s.batch) > 0 {
		return s.batch, true
	}
	sms, err := e.store.Read(s.ctx, s.subj.name, s.cursor, maxBatch)
	if err != nil {
		if s.ctx.Err() != nil {
			return nil, false
		}
		if err = storeError(err); transient(err) {
			select {
			case <-time.After(transientWait):
				return nil, true
			case <-s.ctx.Done():
				return nil, false
			}
		}
		s.stop(err)
		return nil, false
	}
	for _, sm := range sms {
		d, err := e.decode(sm)
		if err == nil && s.matches(d) {
			s.batch = append(s.batch, d)
		}
		s.cursor = sm.Seq + 1
	}
	if len(sms) == maxBatch {
		return s.batch, true
	}
	j := f.join(s)
	switch {
	case j == joined || len(s.batch) > 0 || (j == behind && len(sms) > 0):
		if j == waiting {
			f.unjoin(s) // it has a batch to hand over first
		}
		s.emptyBehind = false
		return s.batch, true
	case j == behind && !s.emptyBehind:
		// The fan-out moved on since the store was read: read again.
		s.emptyBehind = true
		return nil, true
	case j == behind:
		// Still nothing to read though the fan-out is past it: what
		// lies between was trimmed. It waits among the joiners, woken
		// when the fan-out moves on.
		f.await(s)
	}
	// Caught up with the store, ahead of the fan-out: the fan-out makes
	// it live (or wakes it to read on) once it gets there.
	s.flush()
	defer f.unjoin(s)
	select {
	case <-s.wake:
		return nil, s.checkDelivery()
	case <-s.resWake:
	case <-s.ctx.Done():
		return nil, false
	case <-time.After(50 * time.Millisecond):
	}
	return nil, true
}

// flushHandler tells an asynchronous handler that no delivery follows for
// now (SubscribeOptions.Flush).
func (s *subscription) flushHandler() {
	if s.opts.Flush != nil {
		s.opts.Flush()
	}
}

// deliverBatch hands the batch over, in order, within the in-flight
// bound. Every message is checked against the contract as it is handed
// over (the check is a few map lookups): a revocation, an expiry or a
// role taken away stops the subscription before the next message, not
// after the batch. One record covers what was handed over.
func (s *subscription) deliverBatch(batch []*decoded) {
	sent := &s.sent
	defer func() {
		s.flushHandler()
		sent.record(EventDeliveryDispatched, OutcomeAllow, s.base(), s.e.auditAsync)
	}()
	for _, d := range batch {
		if !s.selects(d) {
			continue
		}
		if !s.acquire() {
			return
		}
		if !s.checkDelivery() {
			s.release()
			return
		}
		sent.add(d.seq, d.m.ID)
		s.running.Add(1)
		s.deliver(d, 1)
	}
}

// deliver hands d to the handler as attempt; the subscription holds one
// in-flight slot for it until settled releases it.
func (s *subscription) deliver(d *decoded, attempt int) {
	if attempt > 1 && s.group == "" { // a work queue's redeliveries are noted where they are leased
		s.e.note(NoteRedelivery, s.subj.name)
	}
	start := s.e.since()
	extends := s.g != nil && s.e.extends(s.g)
	if s.ah != nil {
		h := &handover{Delivery: Delivery{Subject: s.subj.name, Message: d.m, Attempt: attempt, Session: s.sess, src: d}, s: s, d: d, attempt: attempt, start: start}
		if lost := s.opts.LeaseLost; extends && lost != nil {
			id, seq := d.m.ID, d.seq
			h.tracked = true
			s.track(seq, func() { lost(id, seq) })
		}
		defer h.survive()
		s.ah(s.hctx, &h.Delivery, h.done)
		return
	}
	// One at a time, the handler runs on the loop, unless the loop must
	// extend its message's cluster lease meanwhile (keepShared).
	if cap(s.slots) == 1 && !extends {
		err := s.call(s.hctx, d.m, attempt)
		s.e.took(StageDeliver, s.subj.name, start)
		s.settled(d, attempt, err)
		return
	}
	ctx := s.hctx
	var cancel context.CancelCauseFunc
	if extends {
		// A context of its own, which the loss of its cluster lease
		// cancels (loseLeases).
		ctx, cancel = context.WithCancelCause(s.hctx)
		s.track(d.seq, func() { cancel(errLeaseLost()) })
	}
	go func() {
		err := s.call(ctx, d.m, attempt)
		if cancel != nil {
			s.untrack(d.seq)
			cancel(nil)
		}
		s.e.took(StageDeliver, s.subj.name, start)
		s.settled(d, attempt, err)
	}()
}

// errLeaseLost is the cause of a handler's context cancelled because its
// delivery's cluster lease was lost, and what refuses its answer: the
// code a pull consumer's answer after its lease ran out is refused with.
func errLeaseLost() error {
	return NewError(CodeAckNotAllowed, "the delivery's cluster lease was lost: another node may run the message, and this delivery's answer settles nothing")
}

// track registers lose as what tells the delivery of seq, handed over
// now, that its cluster lease was lost. Deliveries and losses of leases
// are both the loop's (deliver, keepShared), and a message is handed to a
// subscription once at a time: seq names one delivery until untrack.
func (s *subscription) track(seq uint64, lose func()) {
	s.lostMu.Lock()
	if s.onLost == nil {
		s.onLost = make(map[uint64]func())
	}
	s.onLost[seq] = lose
	s.lostMu.Unlock()
}

// untrack ends the tracking of the delivery of seq: it was answered.
func (s *subscription) untrack(seq uint64) {
	s.lostMu.Lock()
	delete(s.onLost, seq)
	s.lostMu.Unlock()
}

// loseLeases tells the deliveries of seqs still running that their
// cluster leases were lost. Only the loop calls it (keepShared).
func (s *subscription) loseLeases(seqs []uint64) {
	var tell []func()
	s.lostMu.Lock()
	for _, seq := range seqs {
		if lose := s.onLost[seq]; lose != nil {
			delete(s.onLost, seq)
			tell = append(tell, lose)
		}
	}
	s.lostMu.Unlock()
	for _, lose := range tell {
		lose() // never blocks: a cancel, or a transport's LeaseLost
	}
}

// handover is one delivery to an asynchronous handler: the Delivery it is
// handed and what its done needs, in one allocation rather than three (the
// Delivery, the closure and its once). done keeps its own copy of the
// message and attempt: the handler may change its Delivery.
type handover struct {
	Delivery
	s       *subscription
	d       *decoded
	attempt int
	start   time.Time
	once    atomic.Bool
	tracked bool // the loss of its cluster lease is told (track)
}

// done is the delivery's done: the first call settles it, later ones do
// nothing.
func (h *handover) done(err error) {
	if h.once.CompareAndSwap(false, true) {
		if h.tracked {
			h.s.untrack(h.d.seq)
		}
		h.s.e.took(StageDeliver, h.s.subj.name, h.start)
		h.s.settled(h.d, h.attempt, err)
	}
}

// errDeliveryPanicked is what a subscription whose delivery panicked
// ends with, and what the delivery is settled with: a failure that
// spends its attempt, so that a message the code delivering it panics on
// runs out of attempts (quarantined where the subject says so) rather
// than ending one consumer after another for ever.
func errDeliveryPanicked() error {
	return NewError(CodeInternal, "the broker failed delivering on this subscription; subscribe again")
}

// survive, deferred by the subscription's delivery loop, turns a panic of
// the loop into the end of this subscription alone, INTERNAL, as net/http
// turns a handler's panic into the end of its connection. The loop runs
// code of the store, the decoder, the selector and the filter on what
// publishers and the subscriber chose, and, for a transport, the
// transport's handler: a panic on its goroutine, unrecovered, ended the
// process and every connection and subscription it held. The loop's
// deferred finish then ends the subscription as any stop does (its
// window's deliveries settled, its leases given back, subscription.stopped
// audited with the code). The panic is logged with its stack, card
// numbers redacted, and noted (NotePanic, PanicSubscription); it is never
// returned (its value may quote a message).
func (s *subscription) survive(where string) {
	p := recover()
	if p == nil {
		return
	}
	s.logPanic(where, p)
	s.stop(errDeliveryPanicked())
}

func (s *subscription) logPanic(where string, p any) {
	s.e.panicked(PanicSubscription, "a subscription's "+where+" panicked: the subscription is ended, INTERNAL", panicText(p),
		"subject", noPAN(s.subj.name), "subscription", s.id, "principal", noPAN(s.caller.Principal.ID))
}

// survive, deferred around an asynchronous handler (a transport's: the
// WebSocket server's serverSub.handle), turns its panic into the end of
// the subscription and a failure of this delivery (its attempt spent). It
// runs on the delivery loop or on a redelivery's goroutine, where a
// panic would end the process. The subscription stops first, so the
// failure is not delivered again to it; done does nothing when the
// handler had settled the delivery already.
func (h *handover) survive() {
	p := recover()
	if p == nil {
		return
	}
	h.s.logPanic("handler", p)
	h.s.stop(errDeliveryPanicked())
	h.done(errDeliveryPanicked())
}

// call runs the synchronous handler once on a copy of m with ctx,
// recovering a panic as a failure.
func (s *subscription) call(ctx context.Context, m *Message, attempt int) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("pigeon: handler panicked: %v", p)
		}
	}()
	d := handed(m)
	d.Subject, d.Attempt, d.Session = s.subj.name, attempt, s.sess
	return s.h(ctx, d)
}

// settled takes the handler's answer to one delivery. An acknowledgement
// joins the next acknowledged-range record; a failure is recorded at once
// and, on a pubsub subject, delivered again after the backoff until its
// attempts run out. Work-queue outcomes are settled in the store by the
// loop, in batches. It never blocks: transports call it from their read
// loops.
func (s *subscription) settled(d *decoded, attempt int, err error) {
	if s.group != "" {
		s.resMu.Lock()
		s.settles = append(s.settles, outcome{d, err})
		s.resMu.Unlock()
		s.pokeResults()
		s.done1()
		return
	}
	if err == nil || s.atMost {
		if !s.atMost {
			s.resMu.Lock()
			s.acked.add(d.seq, d.m.ID)
			s.resMu.Unlock()
			if s.nAnswers.Add(1) == maxBatch {
				s.pokeResults()
			}
		}
		s.done1()
		return
	}
	rec := EventDeliveryNacked.record(OutcomeDeny, CodeOK, s.base())
	rec.MessageID, rec.Seqs = d.m.ID, seqText(d.seq)
	s.hold(rec)
	if attempt >= s.subj.maxAtt || s.ctx.Err() != nil || errors.Is(err, ErrUndelivered) {
		if s.ctx.Err() == nil && attempt >= s.subj.maxAtt {
			rec := EventDeliveryExhausted.record(OutcomeDeny, CodeDeliveryExhausted, s.base())
			rec.MessageID, rec.Seqs = d.m.ID, seqText(d.seq)
			s.hold(rec)
		}
		s.done1()
		return
	}
	delay := s.e.retryDelay(s.subj, attempt, err)
	go func() {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.ctx.Done():
			s.done1()
			return
		}
		if !s.checkDelivery() {
			s.done1()
			return
		}
		s.redispatched(d)
		s.deliver(d, attempt+1)
		s.flushHandler()
	}()
}

// redispatched queues the delivery.dispatched record of a pub/sub
// message handed over again, after the refusal that caused it and before
// any answer to it: an auditor sees each time it was handed over. (A work
// queue records its redeliveries where it leases them.)
func (s *subscription) redispatched(d *decoded) {
	s.hold(batchRecord(EventDeliveryDispatched, OutcomeAllow, s.base(), []logged{{d.seq, d.m.ID}}))
}

// done1 ends one delivery: its slot is free.
func (s *subscription) done1() {
	s.release()
	s.running.Done()
}

// hold queues a refusal's record (or a redelivery's) for the loop, which
// writes it after the record of the delivery it answers (flush).
func (s *subscription) hold(rec store.AuditRecord) {
	s.resMu.Lock()
	s.held = append(s.held, rec)
	s.resMu.Unlock()
	s.nAnswers.Add(1)
	s.pokeResults() // rare: recorded at once if the loop is idle
}

func (s *subscription) pokeResults() {
	select {
	case s.resWake <- struct{}{}:
	default:
	}
}

// flush records what was held (refusals, redeliveries) and the
// acknowledgements reported since the last flush, these in range records,
// and settles work-queue outcomes in the store. Only the loop calls it.
func (s *subscription) flush() {
	s.settlePending()
	s.resMu.Lock()
	s.acked, s.spare = s.spare, s.acked
	s.nAnswers.Store(0)
	held := s.held
	s.held = nil
	s.resMu.Unlock()
	for _, r := range held {
		s.e.auditAsync(r)
	}
	s.spare.record(EventDeliveryAcked, OutcomeAllow, s.base(), s.e.auditAsync)
}

// settlePending settles the work-queue outcomes reported so far in the
// store; their acknowledgements join the next range record. First it
// records what was handed over so far: an answer is never recorded
// before the delivery it answers, even while the loop is still handing
// a batch over (waiting in acquire for window room).
func (s *subscription) settlePending() {
	s.sent.record(EventDeliveryDispatched, OutcomeAllow, s.base(), s.e.auditAsync)
	s.resMu.Lock()
	settles := s.settles
	s.settles = nil
	s.resMu.Unlock()
	if len(settles) > 0 {
		s.e.settleAll(s, settles)
	}
}

// acquire takes an in-flight slot, waiting while all are taken. It fails
// when the subscription ends.
func (s *subscription) acquire() bool {
	if s.ctx.Err() != nil {
		return false // stopped: nothing more is handed over, whatever the window holds
	}
	select {
	case s.slots <- struct{}{}:
		return true
	default:
	}
	s.flushHandler() // what was handed over leaves before the wait
	for {
		select {
		case s.slots <- struct{}{}:
			return true
		case <-s.wake:
			// A revocation or an access change: judged now, not once
			// the client frees the window or the ack wait passes.
			if !s.checkDelivery() {
				return false
			}
		case <-s.resWake:
			// Settle work-queue answers at once (their leases run);
			// record acknowledgements when many gathered.
			s.settlePending()
			if s.nAnswers.Load() >= maxBatch {
				s.flush()
			}
		case <-s.ctx.Done():
			return false
		}
	}
}

func (s *subscription) release() { <-s.slots }
