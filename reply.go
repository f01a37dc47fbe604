package pigeon

import (
	"context"
	"errors"
	"sync"
	"time"

	"pigeon/store"
)

// replyTTL is how long an unclaimed reply is parked for a later claim.
const replyTTL = 5 * time.Minute

// Bounds of the replies parked for requesters not waiting: in number, in
// bytes (Message.sizeHint) in all, and in bytes for one requester. A requester that
// abandons requests, over and over, to services whose replies are large
// would otherwise have the broker hold each reply for replyTTL, up to
// maxParkedReplies of them at the largest size a message may have: tens
// of gigabytes. Beyond a bound a reply is not parked (a waiting requester
// still gets it): the requester that retries gets REQUEST_TIMEOUT again,
// not another's memory.
const (
	maxParkedReplies           = 100_000
	maxParkedBytes             = 256 << 20
	maxParkedBytesPerRequester = 16 << 20
)

// replyTable routes replies to waiting requesters by request id. A waiter
// is bound to the principal that publishes the request: a reply goes to it
// only when the stored request is that principal's, and a second waiter
// for an id that is waited on is refused, never swapped in. Request binds
// it to the credential too (sentBy) before it claims or waits for the
// reply to a request it repeats.
type replyTable struct {
	mu      sync.Mutex
	waiters map[string]replyWaiter
	parked  map[string]parkedReply
	closed  bool
	// bytes is the size (Message.sizeHint) of the parked replies, in all and by requester
	// (a requester with none parked has no entry).
	bytes       int64
	byRequester map[string]int64
}

// handOff is what became of a reply given to replyTable.deliver.
type handOff int

const (
	replyTaken   handOff = iota // a waiting requester took it
	replyParked                 // kept for the requester to claim
	replyNotKept                // no requester waits, and a bound kept it from being parked
)

type replyWaiter struct {
	ch        chan *Message
	requester string
}

type parkedReply struct {
	msg       *Message
	requester string
	expires   time.Time
	size      int64 // msg.sizeHint()
}

func (t *replyTable) init() {
	t.waiters = map[string]replyWaiter{}
	t.parked = map[string]parkedReply{}
	t.byRequester = map[string]int64{}
}

// unparkLocked forgets the reply parked under id, p. Call it with mu held.
func (t *replyTable) unparkLocked(id string, p parkedReply) {
	delete(t.parked, id)
	t.bytes -= p.size
	if n := t.byRequester[p.requester] - p.size; n > 0 {
		t.byRequester[p.requester] = n
	} else {
		delete(t.byRequester, p.requester)
	}
}

// wait registers requester's waiter for the reply to request id. It fails
// with SHUTTING_DOWN after closeAll, and with MESSAGE_ID_TAKEN when another
// request is already waiting under id.
func (t *replyTable) wait(id, requester string) (chan *Message, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errShutdown()
	}
	if _, taken := t.waiters[id]; taken {
		return nil, NewError(CodeMessageIDTaken, "a request with this id is already waiting for its reply")
	}
	ch := make(chan *Message, 1)
	t.waiters[id] = replyWaiter{ch: ch, requester: requester}
	return ch, nil
}

// claim takes a parked reply to request id for requester.
func (t *replyTable) claim(id, requester string) *Message {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.parked[id]
	if !ok || p.requester != requester {
		return nil
	}
	t.unparkLocked(id, p)
	return p.msg
}

func (t *replyTable) cancel(id string, ch chan *Message) {
	t.mu.Lock()
	if t.waiters[id].ch == ch {
		delete(t.waiters, id)
	}
	t.mu.Unlock()
}

// deliver hands a reply to request id, published by requester, to that
// requester's waiter, or parks it for the requester within the bounds
// (maxParkedReplies, maxParkedBytes, maxParkedBytesPerRequester).
func (t *replyTable) deliver(id, requester string, m *Message, now time.Time) handOff {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w, ok := t.waiters[id]; ok && w.requester == requester {
		delete(t.waiters, id)
		w.ch <- m
		return replyTaken
	}
	if old, ok := t.parked[id]; ok {
		t.unparkLocked(id, old) // a later reply takes its place
	}
	size := int64(m.sizeHint())
	if len(t.parked) >= maxParkedReplies || t.bytes+size > maxParkedBytes ||
		t.byRequester[requester]+size > maxParkedBytesPerRequester {
		return replyNotKept
	}
	t.parked[id] = parkedReply{msg: m, requester: requester, expires: now.Add(replyTTL), size: size}
	t.bytes += size
	t.byRequester[requester] += size
	return replyParked
}

func (t *replyTable) sweep(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, p := range t.parked {
		if now.After(p.expires) {
			t.unparkLocked(k, p)
		}
	}
}

func (t *replyTable) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for k, w := range t.waiters {
		close(w.ch)
		delete(t.waiters, k)
	}
}

// requestFor finds the accepted request a correlation id names on s, as
// stored and decoded.
func (e *Engine) requestFor(ctx context.Context, s *subject, correlationID string) (store.Message, *Message, bool) {
	sm, err := e.store.Lookup(ctx, correlationID)
	if err != nil || sm.Subject != s.name {
		return store.Message{}, nil, false
	}
	m, err := decodeStored(sm)
	if err != nil {
		return store.Message{}, nil, false
	}
	return sm, m, true
}

// reply admits a reply to req: the replier must hold receive on the
// subject, and the reply passes every gate that does not govern only a
// publish into the log (see publishOnly), the application's gates
// included. It goes to the requester only, never into the subject's log;
// the requester's contract is checked again when the reply is handed over.
// A reply whose id the replier chose (clientID) may not be the id of a
// message the broker holds (MESSAGE_ID_TAKEN): its records (reply.routed,
// reply.delivered) would be that message's receipts.
func (e *Engine) reply(ctx context.Context, a *Admission, stored store.Message, req *Message, clientID bool) (*Result, error) {
	a.op, a.Request = OpReceive, req
	if gate, v, ok := e.judge(ctx, e.replyGates, a); !ok {
		return nil, e.refuse(ctx, a, gate, v)
	}
	// A replier answers only what it may receive: with its receive scoped
	// to some routes (the rule gate, which judges a publish's routes, does
	// not run here), a request outside them was never its to answer, and
	// its reply would reach the requester as the answer of one that was.
	if err := e.inRepliersScope(ctx, a, stored); err != nil {
		return nil, err
	}
	if clientID {
		if _, err := e.store.Lookup(ctx, a.Message.ID); err == nil {
			return nil, e.idTaken(ctx, a)
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, storeError(err)
		}
	}
	m := *a.Message
	m.ContractID, m.SubjectID = a.contractID, a.subj.name
	m.AcceptedAt = formatTime(a.Now)
	// The record first: a reply the log cannot record is refused, never
	// handed over.
	if err := e.audit(ctx, EventReplyRouted.record(OutcomeAllow, CodeOK, store.AuditRecord{Subject: a.subj.name, Principal: a.Principal.ID, ContractID: a.contractID, PolicyID: a.subj.policyID, MessageID: m.ID, Ref: req.ID})); err != nil {
		return nil, auditFailure(err)
	}
	out := m.Clone()
	if h := e.replies.deliver(req.ID, req.Source, out, a.Now); h != replyTaken {
		if h == replyNotKept {
			e.note(NoteReplyNotKept, a.subj.name)
		}
		if e.opts.Cluster != nil {
			// The requester may wait on another node.
			if err := e.notifyReply(ctx, ClusterChange{Kind: ChangeReply, RequestID: req.ID, Requester: req.Source, Reply: out.Clone()}); err != nil {
				return nil, err
			}
		}
	}
	return &Result{Status: StatusAccepted, Message: &m}, nil
}

// replyNotifyWait bounds how long a reply waits for its notice to the
// other nodes to be written (ClusterReplyNotifier).
const replyNotifyWait = 10 * time.Second

// notifyReply tells the other nodes of the reply c, and returns
// CLUSTER_UNCONFIRMED when the Cluster says it could not
// (ClusterReplyNotifier) within ctx and replyNotifyWait.
func (e *Engine) notifyReply(ctx context.Context, c ClusterChange) error {
	n, ok := e.opts.Cluster.(ClusterReplyNotifier)
	if !ok {
		e.opts.Cluster.Notify(c)
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, replyNotifyWait)
	defer cancel()
	if err := n.NotifyReply(wctx, c); err != nil {
		e.opts.Logger.Warn("a reply's notice to the other nodes was not written; a requester waiting on another node gets its timeout",
			"request", c.RequestID, "error", err)
		return WrapError(CodeClusterUnconfirmed, err, "the reply is recorded, but its notice to the other nodes was not written: a requester waiting on another node may not get it")
	}
	return nil
}

// inRepliersScope refuses (POLICY_DENIED, audited) a reply to the
// request stored when the replier's receive on the subject is scoped to
// routes the request lies outside of, as a subscription or a pull of the
// replier would never hand it the request.
func (e *Engine) inRepliersScope(ctx context.Context, a *Admission, stored store.Message) error {
	var scope *permit
	if a.contract != nil {
		scope = a.contract.permits[a.subj.name]
	}
	if e.inReceiveScope(stored, scope) { // true when not scoped
		return nil
	}
	return e.refuse(ctx, a, GateRule, Deny(CodePolicyDenied, "the request is outside the routes this principal may receive"))
}

// handReply gives the requester c the reply r to its request req, if c's
// contract still allows the request's subject at this moment; otherwise
// the reply is dropped (audited) and the requester gets the contract's
// refusal. A reply handed over is recorded (reply.delivered, to the
// requester, ref: the request's id), so its receipts name who received it
// and when; once Shutdown began, the record could be queued after its
// last flush, and the requester gets SHUTTING_DOWN instead.
func (e *Engine) handReply(ctx context.Context, c Caller, req, r *Message) (*Message, error) {
	if !e.ops.enter() { // no reply handed over without its record (inflight.go)
		return nil, errShutdown()
	}
	defer e.ops.leave()
	s := e.subject(req.Subject)
	if _, code, reason := e.checkContract(ctx, c.ContractID, c.Principal, s, OpPublish); code != CodeOK {
		return nil, e.contractError(ctx, EventReplyDropped, c.Principal, req.Subject, c.ContractID, code, reason)
	}
	e.auditAsync(EventReplyDelivered.record(OutcomeAllow, CodeOK, store.AuditRecord{Subject: s.name, Principal: c.Principal.ID, ContractID: c.ContractID, PolicyID: s.policyID, MessageID: r.ID, Ref: req.ID}))
	return r, nil
}

// sentBy refuses c a request that repeats req (a duplicate by its
// idempotency key or its id) unless c's credential sent req (holds). Idempotency keys
// are scoped by principal, so without it a narrower credential of the
// same account (a grant token) that learned a request's key or id could
// claim or wait for the reply meant for the wider one. It is counted in
// flight, as the publish before it was, so that Shutdown waits for its
// receive.denied record; once Shutdown began it is SHUTTING_DOWN, as
// the reply would be (handReply).
func (e *Engine) sentBy(ctx context.Context, c Caller, req *Message) error {
	if !e.ops.enter() { // Shutdown waits for its record (inflight.go)
		return errShutdown()
	}
	defer e.ops.leave()
	if e.holds(ctx, c.Principal, c.ContractID, req.ContractID) {
		return nil
	}
	code := CodeContractPrincipalMismatch
	e.audit(ctx, EventReceiveDenied.record(OutcomeDeny, code, store.AuditRecord{Gate: GateContract, Subject: req.Subject, Principal: c.Principal.ID, ContractID: c.ContractID, MessageID: req.ID}))
	return NewError(code, "the request was sent by another credential; its reply goes to that credential only")
}

// Request publishes m as a request and blocks until its reply arrives or
// ctx ends (REQUEST_TIMEOUT). The reply is the message a responder
// published with correlationId equal to the request's id.
func (e *Engine) Request(ctx context.Context, c Caller, m *Message) (*Message, error) {
	if m == nil {
		return nil, NewError(CodeEnvelopeInvalid, "message is required")
	}
	defer e.took(StageRequest, m.Subject, e.since())
	req := *m
	if req.ID == "" {
		req.ID = NewMessageID()
	}
	ch, err := e.replies.wait(req.ID, c.Principal.ID)
	if err != nil {
		return nil, err
	}
	res, err := e.publish(ctx, c, &req, m.ID != "") // an id drawn here is free
	if err != nil {
		e.replies.cancel(req.ID, ch)
		return nil, err
	}
	id := req.ID
	if res.Status == StatusDuplicate {
		if err := e.sentBy(ctx, c, res.Message); err != nil {
			e.replies.cancel(req.ID, ch)
			return nil, err
		}
	}
	if res.Status == StatusDuplicate && res.Message.ID == req.ID {
		// A retry by the request's own id: its reply may have come while
		// nobody waited, and been parked for this retry (the waiter above
		// was registered after it).
		if r := e.replies.claim(id, c.Principal.ID); r != nil {
			e.replies.cancel(id, ch)
			return e.handReply(ctx, c, res.Message, r)
		}
	}
	if res.Status == StatusDuplicate && res.Message.ID != req.ID {
		// The original request was sent before: wait for (or claim) its reply.
		e.replies.cancel(req.ID, ch)
		id = res.Message.ID
		if r := e.replies.claim(id, c.Principal.ID); r != nil {
			return e.handReply(ctx, c, res.Message, r)
		}
		if ch, err = e.replies.wait(id, c.Principal.ID); err != nil {
			return nil, err
		}
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return nil, errShutdown()
		}
		return e.handReply(ctx, c, res.Message, r)
	case <-ctx.Done():
		e.replies.cancel(id, ch)
		code := CodeRequestTimeout
		if errors.Is(ctx.Err(), context.Canceled) {
			return nil, WrapError(code, ctx.Err(), "request canceled before a reply arrived")
		}
		return nil, WrapError(code, ctx.Err(), "no reply before the deadline")
	}
}
