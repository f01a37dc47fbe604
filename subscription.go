package pigeon

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"pigeon/internal/cond"
	"pigeon/store"
)

// liveQueue is how many messages a live pubsub subscriber may have waiting
// before it falls back to reading from the store.
const liveQueue = 256

type subscription struct {
	id      string
	e       *Engine
	sess    Session
	caller  Caller
	subj    *subject
	opts    SubscribeOptions
	sel     Selector
	filter  *cond.Condition
	group   string
	h       Handler
	scope   *permit // the contract's permit on the subject: its receive scope applies
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	wake    chan struct{}
	slots   chan struct{}
	running sync.WaitGroup
	errMu   sync.Mutex
	err     error
	stopped atomic.Bool

	// pubsub: messages pushed by the subject's fan-out while live.
	queue   chan queued
	lagging atomic.Bool
	cursor  uint64 // next sequence to deliver (owned by the loop)
}

type queued struct {
	m    *Message
	data any
}

var subSeq atomic.Uint64

func (s *subscription) ID() string            { return s.id }
func (s *subscription) Done() <-chan struct{} { return s.done }
func (s *subscription) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

func (s *subscription) Unsubscribe(ctx context.Context) error {
	s.stop(nil)
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

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

// subscriptions is the engine's table of running subscriptions and the
// per-subject fan-outs.
type subscriptions struct {
	mu      sync.RWMutex // write-locked to change the tables
	all     map[*subscription]struct{}
	fanouts map[string]*fanout
}

func (t *subscriptions) init() {
	t.all = map[*subscription]struct{}{}
	t.fanouts = map[string]*fanout{}
}

func (t *subscriptions) closeAll() {
	t.mu.Lock()
	subs := make([]*subscription, 0, len(t.all))
	for s := range t.all {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	for _, s := range subs {
		s.stop(errShutdown())
	}
}

// sessionSubs tracks one session's subscriptions.
type sessionSubs struct {
	mu   sync.Mutex
	subs []*subscription
}

func (ss *sessionSubs) add(s *subscription) {
	ss.mu.Lock()
	ss.subs = append(ss.subs, s)
	ss.mu.Unlock()
}

func (ss *sessionSubs) closeAll() {
	ss.mu.Lock()
	subs := ss.subs
	ss.subs = nil
	ss.mu.Unlock()
	for _, s := range subs {
		s.stop(nil)
		<-s.done
	}
}

// notify wakes deliveries of subject after seq was appended. It never
// blocks the publisher.
func (e *Engine) notify(subject string, _ uint64) {
	if f := e.fanoutOf(subject); f != nil {
		f.poke()
	}
}

// onContractRevoked wakes subscriptions so that they notice at once.
func (e *Engine) onContractRevoked(id string) {
	e.subs.mu.Lock()
	var hit []*subscription
	for s := range e.subs.all {
		if s.caller.ContractID == id {
			hit = append(hit, s)
		}
	}
	e.subs.mu.Unlock()
	for _, s := range hit {
		s.poke()
	}
}

// run is the subscription's delivery loop.
func (s *subscription) run() {
	defer s.finish()
	if s.subj.mode == ModePubSub {
		s.runPubSub()
	} else {
		s.runGroup()
	}
}

func (s *subscription) finish() {
	s.stop(nil)
	s.running.Wait()
	e := s.e
	e.subs.mu.Lock()
	delete(e.subs.all, s)
	if f := e.subs.fanouts[s.subj.name]; f != nil {
		f.remove(s)
	}
	e.subs.mu.Unlock()
	if s.group != "" {
		e.releaseLeases(s)
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

// checkDelivery re-checks the contract and receive rule before a delivery;
// a failure stops the subscription. While the audit log cannot be written
// it waits: nothing is delivered without its evidence, and the
// subscription goes on once the log is whole.
func (s *subscription) checkDelivery() bool {
	for s.e.auditGuard(s.ctx) != nil {
		select {
		case <-s.ctx.Done():
			return false
		case <-time.After(auditPause):
		}
	}
	cur := s.e.subject(s.subj.name)
	if _, code, reason := s.e.checkContract(s.ctx, s.caller.ContractID, s.caller.Principal, cur, OpReceive); code != CodeOK {
		s.stop(NewError(code, "%s", reason))
		return false
	}
	return true
}

// selects reports whether the message passes the subscription's filter.
func (s *subscription) selects(m *Message, data any) bool {
	if s.scope != nil && !s.scope.inScope(OpReceive, data) {
		return false
	}
	if s.filter == nil {
		return true
	}
	v := condVars(s.caller.Principal, m, data)
	ok, err := s.filter.Eval(&v)
	return err == nil && ok
}

// runPubSub delivers in sequence order: from the store while behind, from
// the fan-out's queue while live.
func (s *subscription) runPubSub() {
	e := s.e
	f := e.fanoutOf(s.subj.name)
	for s.ctx.Err() == nil {
		if !s.lagging.Load() {
			select {
			case q := <-s.queue:
				if q.m.Sequence < s.cursor {
					continue
				}
				s.deliverPubSub(q.m, q.data)
				s.cursor = q.m.Sequence + 1
				continue
			case <-s.wake:
				if !s.checkDelivery() {
					return
				}
				continue
			case <-s.ctx.Done():
				return
			}
		}
		// Behind: drain what the queue still holds, then read the store.
		for drained := false; !drained; {
			select {
			case q := <-s.queue:
				if q.m.Sequence >= s.cursor {
					s.deliverPubSub(q.m, q.data)
					s.cursor = q.m.Sequence + 1
				}
			default:
				drained = true
			}
		}
		sms, err := e.store.Read(s.ctx, s.subj.name, s.cursor, 256)
		if err != nil {
			if s.ctx.Err() == nil {
				s.stop(storeError(err))
			}
			return
		}
		for _, sm := range sms {
			if s.ctx.Err() != nil {
				return
			}
			d, err := e.decode(sm)
			if err != nil {
				s.cursor = sm.Seq + 1
				continue
			}
			if s.sel.Match(d.data) {
				s.deliverPubSub(d.m, d.data)
			}
			s.cursor = sm.Seq + 1
		}
		if len(sms) == 256 {
			continue
		}
		if f.join(s) {
			continue
		}
		select {
		case <-s.wake:
			if !s.checkDelivery() {
				return
			}
		case <-s.ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// deliverPubSub runs the handler for one message, retrying a failure with
// the subject's backoff up to its attempts, then exhausting it.
func (s *subscription) deliverPubSub(m *Message, data any) {
	if !s.checkDelivery() || !s.selects(m, data) {
		return
	}
	s.dispatch(func() {
		for attempt := 1; ; attempt++ {
			err := s.call(m, attempt)
			if err == nil {
				return
			}
			if attempt >= s.subj.maxAtt || s.ctx.Err() != nil {
				if s.ctx.Err() == nil {
					s.e.audit(s.ctx, EventDeliveryExhausted.record(OutcomeDeny, CodeDeliveryExhausted, store.AuditRecord{Subject: s.subj.name, Principal: s.caller.Principal.ID, ContractID: s.caller.ContractID, MessageID: m.ID, Ref: s.id}))
				}
				return
			}
			select {
			case <-time.After(s.e.retryDelay(s.subj, attempt, err)):
			case <-s.ctx.Done():
				return
			}
			if !s.checkDelivery() {
				return
			}
		}
	})
}

// dispatch runs fn inline when the subscription handles one message at a
// time, and on a goroutine of its own within the in-flight bound otherwise.
func (s *subscription) dispatch(fn func()) {
	if cap(s.slots) == 1 {
		fn()
		return
	}
	s.acquire()
	s.running.Add(1)
	go func() {
		defer s.running.Done()
		defer s.release()
		fn()
	}()
}

func (s *subscription) acquire() {
	select {
	case s.slots <- struct{}{}:
	case <-s.ctx.Done():
		s.slots <- struct{}{} // handlers still finish; a slot frees soon
	}
}

func (s *subscription) release() { <-s.slots }

// call runs the handler once, recovering a panic as a failure, and audits
// the outcome.
func (s *subscription) call(m *Message, attempt int) (err error) {
	e := s.e
	rec := store.AuditRecord{Subject: s.subj.name, Principal: s.caller.Principal.ID, ContractID: s.caller.ContractID, PolicyID: s.subj.policyID, MessageID: m.ID, Ref: s.id}
	rec.Type, rec.Outcome = string(EventDeliveryDispatched), string(OutcomeAllow)
	e.auditAsync(rec)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("pigeon: handler panicked: %v", p)
		}
		if err == nil {
			rec.Type = string(EventDeliveryAcked)
		} else {
			rec.Type, rec.Outcome = string(EventDeliveryNacked), string(OutcomeDeny)
		}
		e.auditAsync(rec)
	}()
	return s.h(s.ctx, &Delivery{Subject: s.subj.name, Message: m.Clone(), Attempt: attempt, Session: s.sess})
}

// runGroup competes for leased messages of a work-queue group.
func (s *subscription) runGroup() {
	e := s.e
	for s.ctx.Err() == nil {
		free := cap(s.slots) - len(s.slots)
		if cap(s.slots) == 1 {
			free = 1
		}
		var wait time.Duration = 50 * time.Millisecond
		if free > 0 && s.checkDelivery() {
			msgs, attempts, next, err := e.leaseFor(s, free)
			if err != nil {
				if s.ctx.Err() == nil {
					s.stop(err)
				}
				return
			}
			for i, d := range msgs {
				s.dispatch(func() { s.handleLeased(d.m, attempts[i]) })
			}
			if len(msgs) == free {
				continue
			}
			if next > 0 && next < wait {
				wait = next
			}
		}
		select {
		case <-s.wake:
		case <-s.ctx.Done():
		case <-time.After(wait):
		}
	}
}

func (s *subscription) handleLeased(m *Message, attempt int) {
	err := s.call(m, attempt)
	ctx := context.WithoutCancel(s.ctx)
	_ = s.e.settle(ctx, s, m.Sequence, err)
	s.e.pokeGroup(s.subj.name)
}
