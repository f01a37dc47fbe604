package pigeon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"pigeon/internal/cond"
	"pigeon/store"
)

// Handler handles one pushed delivery. Returning nil acknowledges it;
// returning an error, or panicking, gives it back for redelivery with the
// subject's backoff. ctx ends with the subscription; on a work-queue or
// request/reply subject in a cluster whose leases are extended
// (LeaseExtender), it is also cancelled when the delivery's lease is lost
// (another node may run the message), context.Cause(ctx) then an *Error
// with code CodeAckNotAllowed: the delivery's answer settles nothing.
type Handler func(ctx context.Context, d *Delivery) error

// RetryError is a handler failure that asks for redelivery after Delay
// rather than after the subject's backoff.
type RetryError struct {
	Delay time.Duration
	Err   error
}

func (e *RetryError) Error() string {
	if e.Err == nil {
		return "pigeon: retry after " + e.Delay.String()
	}
	return e.Err.Error()
}

func (e *RetryError) Unwrap() error { return e.Err }

// RetryAfter returns a handler error that nacks the delivery and asks for
// the next attempt after delay. A delay above MaxRetryDelay waits
// MaxRetryDelay.
func RetryAfter(delay time.Duration, err error) error { return &RetryError{Delay: delay, Err: err} }

// MaxRetryDelay is the longest redelivery delay a consumer may ask for. A
// nacked message stays leased, and its group in memory, until it is due
// again, so a delay without bound would let a consumer pin both for as
// long as it liked. A handler's RetryAfter above it is shortened to it,
// and so is a Session's Nack, NackSequence or NackAttempt (in process and
// over WebSocket); a nack that names a longer delay to the engine
// (Engine.Nack, a wire delayMs) is refused with CodeInvalidArgument.
const MaxRetryDelay = 12 * time.Hour

// RetryDelayMillis converts a wire delayMs to the delay of a nack,
// refusing with CodeInvalidArgument a negative value or one above
// MaxRetryDelay.
func RetryDelayMillis(ms int64) (time.Duration, error) {
	d, err := MillisField("delayMs", ms)
	if err != nil {
		return 0, err
	}
	if err := checkRetryDelay(d); err != nil {
		return 0, err
	}
	return d, nil
}

func checkRetryDelay(d time.Duration) error {
	if d > MaxRetryDelay {
		return NewError(CodeInvalidArgument, "a nack delay is at most %s (got %s)", MaxRetryDelay, d)
	}
	return nil
}

// ErrUndelivered is what a transport's handler returns (or wraps) when a
// delivery of a work-queue or request/reply subject never reached its
// consumer, which is going away: the message goes back to the group at
// once and the attempt does not count, so the next consumer sees the same
// attempt number and no attempt is spent on a consumer that never saw it.
var ErrUndelivered = errors.New("pigeon: the delivery did not reach the consumer")

// AsyncHandler is a Handler for consumers that answer later, as
// transports do: it hands d on and returns at once, and calls done exactly
// once with the outcome (nil acknowledges; an error, a RetryError or
// ErrUndelivered as a Handler would return). The subscription keeps the
// delivery in flight, holding one of its slots, until done is called;
// done never blocks. d.Message is shared with other subscribers and must
// not be modified.
type AsyncHandler func(ctx context.Context, d *Delivery, done func(error))

// Middleware wraps a Handler.
type Middleware func(Handler) Handler

// Delivery is one pushed message.
type Delivery struct {
	Subject string
	Message *Message
	// Attempt counts deliveries of this message to this consumer or group, from 1.
	Attempt int
	// Session is the receiving session: a handler publishes replies and
	// follow-up messages through it, under its contract and every gate.
	Session Session

	src *decoded // the shared decoded message, for AppendMessageJSON
}

// AppendMessageJSON appends the JSON encoding of the delivered message to
// b, as Message.AppendJSON does. A message delivered to many subscribers
// is encoded once for all of them.
func (d *Delivery) AppendMessageJSON(b []byte) []byte {
	if d.src != nil && d.src.m == d.Message {
		return append(b, d.src.json()...)
	}
	return d.Message.AppendJSON(b)
}

// Subscription is a running push subscription.
type Subscription interface {
	// ID identifies the subscription.
	ID() string
	// Unsubscribe stops deliveries and waits for running handlers (or ctx).
	// Leased messages go back to the group. It is idempotent. Called from
	// one of the subscription's own handlers with the context the handler
	// was given (or one derived from it), it does not wait for the caller:
	// it returns at once, and the subscription ends (Done) once the
	// running handlers, the caller included, have returned.
	Unsubscribe(ctx context.Context) error
	// Done is closed when the subscription has stopped, for any reason.
	Done() <-chan struct{}
	// Err says why a stopped subscription stopped: nil after Unsubscribe,
	// the contract error (CONTRACT_REVOKED, CONTRACT_EXPIRED, …) otherwise.
	Err() error
}

// Start positions of a subscription on a pubsub subject.
type Start struct {
	kind startKind
	seq  uint64 // startSequence: the first sequence delivered
}

// startKind says where a Start starts.
type startKind byte

const (
	startNew      startKind = iota // after the last message stored
	startFirst                     // at the first message retained
	startSequence                  // at Start.seq
)

// Start positions.
var (
	StartNew   = Start{}
	StartFirst = Start{kind: startFirst}
)

// StartAt starts at sequence seq. A seq more than one past the subject's
// last message cannot be a position on the subject as it stands: the
// subject was numbered anew since the caller saw it (the broker lost its
// store, or it is another broker), and a subscription that waited for seq
// would skip every message until the new numbering reached it. It starts
// at the first message retained instead, and its From says so.
func StartAt(seq uint64) Start { return Start{kind: startSequence, seq: seq} }

// Sequence returns the sequence of a Start made by StartAt, and false for
// StartNew and StartFirst.
func (s Start) Sequence() (uint64, bool) { return s.seq, s.kind == startSequence }

// MarshalJSON encodes a Start as the wire protocols carry it: "new",
// "first" or {"sequence":N}.
func (s Start) MarshalJSON() ([]byte, error) {
	switch s.kind {
	case startFirst:
		return []byte(`"first"`), nil
	case startSequence:
		return append(strconv.AppendUint([]byte(`{"sequence":`), s.seq, 10), '}'), nil
	}
	return []byte(`"new"`), nil
}

// UnmarshalJSON decodes "new", "first" or {"sequence":N} with N >= 1;
// anything else fails with INVALID_ARGUMENT.
func (s *Start) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch string(b) {
	case `"new"`, `null`:
		*s = StartNew
		return nil
	case `"first"`:
		*s = StartFirst
		return nil
	}
	var v struct {
		Sequence *uint64 `json:"sequence"`
	}
	// CheckNames: a type that decodes itself is not looked into by the
	// check of the text around it, so it checks its own member names.
	if len(b) == 0 || b[0] != '{' || CheckNames(b, &v) != nil || json.Unmarshal(b, &v) != nil || v.Sequence == nil || *v.Sequence == 0 {
		return NewError(CodeInvalidArgument, `start must be "new", "first" or {"sequence": N} with N >= 1`)
	}
	*s = StartAt(*v.Sequence)
	return nil
}

// SubscribeOption configures Subscribe.
type SubscribeOption func(*SubscribeOptions)

// SubscribeOptions are the resolved options of a subscription; transports
// carry them over the wire.
type SubscribeOptions struct {
	Selector    string
	Filter      string
	Group       string
	MaxInFlight int
	Start       Start
	// AtMostOnce, on a pubsub subject, delivers each message once with no
	// acknowledgement: a handler's failure is not retried. Deliveries are
	// still governed and recorded, per batch.
	AtMostOnce bool
	// Flush, for an AsyncHandler, is called whenever the subscription
	// stops handing deliveries over for now: after a batch, after a
	// redelivery, and before it waits for a free slot. A transport that
	// gathers deliveries into one frame sends it then.
	Flush func()
	// LeaseLost, for an AsyncHandler on a work-queue or request/reply
	// subject in a cluster whose leases are extended (LeaseExtender), is
	// called when the cluster reports the lease of a delivery handed over
	// and not yet answered lost: it ran out (the node was cut off or
	// stalled) and another node may run the message. The delivery's
	// answer then settles nothing, whatever it is: a transport tells its
	// client, or refuses the client's answer, ACK_NOT_ALLOWED. It must
	// not block; it may call the delivery's done. (A Handler's context is
	// cancelled instead, its cause ACK_NOT_ALLOWED.)
	LeaseLost  func(messageID string, seq uint64)
	Middleware []Middleware
}

// WithSelector selects messages by content, e.g. "/kind=chat/room=lobby".
func WithSelector(sel string) SubscribeOption { return func(o *SubscribeOptions) { o.Selector = sel } }

// WithFilter selects messages with a CEL expression over principal and message.
func WithFilter(expr string) SubscribeOption { return func(o *SubscribeOptions) { o.Filter = expr } }

// WithGroup names the consumer group on a work-queue subject.
func WithGroup(g string) SubscribeOption { return func(o *SubscribeOptions) { o.Group = g } }

// WithAtMostOnce makes a pubsub subscription at-most-once: no
// acknowledgements and no redelivery, for telemetry-like subjects. Every
// message still passes the contract check and is recorded in the audit
// log (one record per delivered batch).
func WithAtMostOnce() SubscribeOption { return func(o *SubscribeOptions) { o.AtMostOnce = true } }

// WithFlush sets SubscribeOptions.Flush.
func WithFlush(fn func()) SubscribeOption { return func(o *SubscribeOptions) { o.Flush = fn } }

// WithLeaseLost sets SubscribeOptions.LeaseLost.
func WithLeaseLost(fn func(messageID string, seq uint64)) SubscribeOption {
	return func(o *SubscribeOptions) { o.LeaseLost = fn }
}

// WithMaxInFlight bounds concurrent handler calls (1 to 10000, default 1).
func WithMaxInFlight(n int) SubscribeOption { return func(o *SubscribeOptions) { o.MaxInFlight = n } }

// WithStart sets where a pubsub subscription starts (default StartNew).
func WithStart(s Start) SubscribeOption { return func(o *SubscribeOptions) { o.Start = s } }

// WithMiddleware wraps the handler, outermost first.
func WithMiddleware(mw ...Middleware) SubscribeOption {
	return func(o *SubscribeOptions) { o.Middleware = append(o.Middleware, mw...) }
}

// MaxInFlightLimit is the largest accepted WithMaxInFlight.
const MaxInFlightLimit = 10000

// Subscribe starts push delivery on the engine for caller; see
// Session.Subscribe. It serves transports, which hold no in-process
// Session: the deliveries' Session is nil.
func (e *Engine) Subscribe(ctx context.Context, c Caller, subjectName string, h Handler, opts ...SubscribeOption) (Subscription, error) {
	if h == nil {
		return nil, NewError(CodeInvalidArgument, "a handler is required")
	}
	return e.subscribe(ctx, nil, c, subjectName, h, nil, opts...)
}

// SubscribeAsync is Subscribe for a consumer that answers later: up to
// MaxInFlight deliveries are handed to h without waiting for the first
// one's answer (for a transport: a window of messages on the wire).
// Middleware does not apply to an AsyncHandler.
func (e *Engine) SubscribeAsync(ctx context.Context, c Caller, subjectName string, h AsyncHandler, opts ...SubscribeOption) (Subscription, error) {
	if h == nil {
		return nil, NewError(CodeInvalidArgument, "a handler is required")
	}
	return e.subscribe(ctx, nil, c, subjectName, nil, h, opts...)
}

// subscribe is Subscribe for sess, which the deliveries carry; exactly one
// of h and ah is set.
func (e *Engine) subscribe(ctx context.Context, sess Session, c Caller, subjectName string, h Handler, ah AsyncHandler, opts ...SubscribeOption) (Subscription, error) {
	if !e.ops.enter() { // Shutdown waits for its record and its goroutines' start (inflight.go)
		return nil, errShutdown()
	}
	defer e.ops.leave()
	if err := e.auditGuard(ctx); err != nil {
		return nil, err
	}
	if h == nil && ah == nil {
		return nil, NewError(CodeInvalidArgument, "a handler is required")
	}
	var o SubscribeOptions
	for _, fn := range opts {
		fn(&o)
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = 1
	}
	if o.MaxInFlight < 0 || o.MaxInFlight > MaxInFlightLimit {
		return nil, NewError(CodeInvalidArgument, "maxInFlight must be between 1 and %d", MaxInFlightLimit)
	}
	s := e.subject(subjectName)
	if s == nil {
		return nil, NewError(CodeSubjectNotFound, "unknown subject %q", subjectName)
	}
	if err := checkGroupName(o.Group); err != nil {
		return nil, err
	}
	if isPAN(o.Group) {
		// A group's name is kept in the store, the metrics and the audit
		// log (delivery.exhausted): never a card number.
		return nil, NewError(CodeRawPANDetected, "a group name may not be a raw card number")
	}
	if o.AtMostOnce && s.mode != ModePubSub {
		return nil, NewError(CodeInvalidArgument, "at-most-once delivery is for pubsub subjects; %q is %s", s.name, s.mode)
	}
	sel, err := ParseSelector(orAll(o.Selector))
	if err != nil {
		return nil, err
	}
	k, code, reason := e.checkContract(ctx, c.ContractID, c.Principal, s, OpReceive)
	if code != CodeOK {
		return nil, e.contractError(ctx, EventSubscribeDenied, c.Principal, s.name, c.ContractID, code, reason)
	}
	var filter *cond.Condition
	if o.Filter != "" {
		if filter, err = e.subscriptionFilter(ctx, c, s.name, o.Filter); err != nil {
			return nil, err
		}
	}
	scope := k.permits[s.name]
	for i := len(o.Middleware) - 1; h != nil && i >= 0; i-- {
		h = o.Middleware[i](h)
	}
	holder := pushHolder + "sub_" + strconv.FormatUint(subSeq.Add(1), 10)
	sub := &subscription{
		id: holder[len(pushHolder):], leaseHolder: holder, e: e, sess: sess, caller: c, subj: s, opts: o, sel: sel, filter: filter, h: h, ah: ah, atMost: o.AtMostOnce,
		done: make(chan struct{}), wake: make(chan struct{}, 1), resWake: make(chan struct{}, 1), slots: make(chan struct{}, o.MaxInFlight), scope: scope,
		k: k,
	}
	sub.ctx, sub.cancel = context.WithCancel(e.ctx) // ends with the subscription or Shutdown
	sub.hctx = context.WithValue(sub.ctx, handlerOf{}, sub)
	if s.mode == ModePubSub {
		first, last, err := e.store.Bounds(ctx, s.name)
		if err != nil {
			return nil, storeError(err)
		}
		switch o.Start.kind {
		case startNew:
			sub.cursor = last + 1
		case startFirst:
			sub.cursor = max(first, 1)
		default:
			sub.cursor = max(o.Start.seq, 1)
			if sub.cursor > last+1 {
				e.opts.Logger.Warn("pigeon: a subscription asked to start beyond the subject's end, which was numbered anew: it starts at the first message retained",
					"subject", s.name, "start", sub.cursor, "last", last)
				sub.cursor = max(first, 1)
			}
		}
		sub.from = sub.cursor
		sub.queue = make(chan *decoded, liveQueue)
		sub.lagging.Store(true)
	} else {
		sub.group = consumerGroup(scope, &o, sel, c.Principal)
		// The group starts now, within the subject's cap, rather than at
		// the subscription's first lease. The subscription holds it until
		// it has stopped (finish).
		g, err := e.groupWithin(ctx, store.GroupKey{Subject: s.name, Group: sub.group}, e.opts.MaxGroupsPerSubject)
		if err != nil {
			sub.cancel()
			if ErrorCode(err) == CodeTooManyGroups {
				e.audit(ctx, EventSubscribeDenied.record(OutcomeDeny, CodeTooManyGroups, store.AuditRecord{Subject: s.name, Principal: c.Principal.ID, ContractID: c.ContractID}))
			}
			return nil, err
		}
		sub.g = g
	}
	abandon := func() { // the subscription never runs
		sub.cancel()
		if sub.g != nil {
			e.releaseGroup(sub.g)
		}
	}
	e.subs.mu.Lock()
	if e.closed.Load() {
		e.subs.mu.Unlock()
		abandon()
		return nil, errShutdown()
	}
	if !e.subs.add(sub, e.opts.MaxSubscriptionsPerPrincipal) {
		e.subs.mu.Unlock()
		abandon()
		e.audit(ctx, EventSubscribeDenied.record(OutcomeDeny, CodeTooManySubscriptions, store.AuditRecord{Subject: s.name, Principal: c.Principal.ID, ContractID: c.ContractID}))
		return nil, NewError(CodeTooManySubscriptions, "this principal runs %d subscriptions, the most allowed; end one first", e.opts.MaxSubscriptionsPerPrincipal)
	}
	f := e.subs.fanouts[s.name]
	if f == nil {
		f = newFanout(e, s.name)
		e.subs.fanouts[s.name] = f
		e.goTracked(f.run)
	}
	f.add(sub)
	e.subs.mu.Unlock()
	if err := e.audit(ctx, EventSubscriptionStarted.record(OutcomeAllow, CodeOK, store.AuditRecord{Subject: s.name, Principal: c.Principal.ID, ContractID: c.ContractID, Ref: sub.id})); err != nil {
		// No subscription runs without its record.
		e.subs.mu.Lock()
		e.subs.remove(sub)
		f.remove(sub)
		e.subs.mu.Unlock()
		abandon()
		return nil, auditFailure(err)
	}
	e.goTracked(sub.run)
	return sub, nil
}

func orAll(sel string) string {
	if sel == "" {
		return "/"
	}
	return sel
}

func (s *localSession) Subscribe(ctx context.Context, subject string, h Handler, opts ...SubscribeOption) (Subscription, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, NewError(CodeInvalidArgument, "a handler is required")
	}
	sub, err := s.e.subscribe(ctx, s, s.caller, subject, h, nil, opts...)
	if err != nil {
		return nil, err
	}
	s.subs.add(sub.(*subscription))
	return sub, nil
}
