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

// maxParkedReplies bounds the replies parked for requesters not waiting.
const maxParkedReplies = 100_000

// replyTable routes replies to waiting requesters by correlation id.
type replyTable struct {
	mu      sync.Mutex
	waiters map[string]chan *Message
	parked  map[string]parkedReply
	closed  bool
}

type parkedReply struct {
	msg       *Message
	requester string
	expires   time.Time
}

func (t *replyTable) init() {
	t.waiters = map[string]chan *Message{}
	t.parked = map[string]parkedReply{}
}

// wait registers a waiter for replies to request id.
func (t *replyTable) wait(id string) (chan *Message, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, false
	}
	ch := make(chan *Message, 1)
	t.waiters[id] = ch
	return ch, true
}

// claim takes a parked reply to request id for requester.
func (t *replyTable) claim(id, requester string) *Message {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.parked[id]
	if !ok || p.requester != requester {
		return nil
	}
	delete(t.parked, id)
	return p.msg
}

func (t *replyTable) cancel(id string, ch chan *Message) {
	t.mu.Lock()
	if t.waiters[id] == ch {
		delete(t.waiters, id)
	}
	t.mu.Unlock()
}

// deliver hands a reply to its waiter, or parks it.
func (t *replyTable) deliver(id, requester string, m *Message, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ch, ok := t.waiters[id]; ok {
		delete(t.waiters, id)
		ch <- m
		return
	}
	if len(t.parked) < maxParkedReplies {
		t.parked[id] = parkedReply{msg: m, requester: requester, expires: now.Add(replyTTL)}
	}
}

func (t *replyTable) sweep(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, p := range t.parked {
		if now.After(p.expires) {
			delete(t.parked, k)
		}
	}
}

func (t *replyTable) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for k, ch := range t.waiters {
		close(ch)
		delete(t.waiters, k)
	}
}

// requestFor finds the accepted request a correlation id names on s.
func (e *Engine) requestFor(ctx context.Context, s *subject, correlationID string) (*Message, bool) {
	sm, err := e.store.Lookup(ctx, correlationID)
	if err != nil || sm.Subject != s.name {
		return nil, false
	}
	m, err := decodeStored(sm)
	if err != nil {
		return nil, false
	}
	return m, true
}

// reply admits a reply to req: the replier must hold receive on the
// subject, and the reply passes the envelope, forbidden-field and
// tokenized-field gates. It goes to the requester only, never into the
// subject's log.
func (e *Engine) reply(ctx context.Context, a *Admission, req *Message) (*Result, error) {
	a.op = OpReceive
	for _, g := range []Gate{envelopeGate{}, contractGate{e: e}, forbiddenGate{}, tokenizedGate{}} {
		if v := g.Check(ctx, a); !v.Allowed() {
			return nil, e.refuse(ctx, a, g.Name(), v)
		}
	}
	m := *a.Message
	m.ContractID, m.SubjectID = a.contractID, a.subj.name
	m.AcceptedAt = formatTime(a.Now)
	out := m.Clone()
	e.replies.deliver(req.ID, req.Source, out, a.Now)
	e.audit(ctx, store.AuditRecord{Type: "reply.routed", Outcome: string(OutcomeAllow), Subject: a.subj.name, Principal: a.Principal.ID,
		ContractID: a.contractID, PolicyID: a.subj.policyID, MessageID: m.ID, Ref: req.ID})
	return &Result{Status: StatusAccepted, Message: &m}, nil
}

// Request publishes m as a request and blocks until its reply arrives or
// ctx ends (REQUEST_TIMEOUT). The reply is the message a responder
// published with correlationId equal to the request's id.
func (e *Engine) Request(ctx context.Context, c Caller, m *Message) (*Message, error) {
	if m == nil {
		return nil, NewError(CodeEnvelopeInvalid, "message is required")
	}
	req := *m
	if req.ID == "" {
		req.ID = newMessageID()
	}
	ch, ok := e.replies.wait(req.ID)
	if !ok {
		return nil, NewError(CodeShutdown, "broker is shutting down")
	}
	res, err := e.Publish(ctx, c, &req)
	if err != nil {
		e.replies.cancel(req.ID, ch)
		return nil, err
	}
	id := req.ID
	if res.Status == StatusDuplicate && res.Message.ID != req.ID {
		// The original request was sent before: wait for (or claim) its reply.
		e.replies.cancel(req.ID, ch)
		id = res.Message.ID
		if r := e.replies.claim(id, c.Principal.ID); r != nil {
			return r, nil
		}
		if ch, ok = e.replies.wait(id); !ok {
			return nil, NewError(CodeShutdown, "broker is shutting down")
		}
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return nil, NewError(CodeShutdown, "broker is shutting down")
		}
		return r, nil
	case <-ctx.Done():
		e.replies.cancel(id, ch)
		code := CodeRequestTimeout
		if errors.Is(ctx.Err(), context.Canceled) {
			return nil, WrapError(code, ctx.Err(), "request canceled before a reply arrived")
		}
		return nil, WrapError(code, ctx.Err(), "no reply before the deadline")
	}
}
