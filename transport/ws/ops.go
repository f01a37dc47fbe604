package ws

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"time"

	"pigeon"
	"pigeon/internal/jsontext"
	"pigeon/internal/readpool"
)

// callerNow is who the connection acts as: its principal, under the
// contract negotiated last.
func (c *conn) callerNow() pigeon.Caller {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.caller
}

// handle works on one frame and queues its answer.
func (c *conn) handle(f *Frame, caller pigeon.Caller) {
	var (
		b   []byte
		err error
	)
	switch f.Op {
	case OpNegotiate:
		b, err = c.negotiate(f)
	case OpRenew:
		b, err = c.renew(f, caller)
	case OpPublish:
		b, err = c.publish(f, caller)
	case OpPublishBatch:
		// Its answer, one result per message, is written from a buffer
		// of frameBufs, which the write gives back.
		var buf *[]byte
		if b, buf, err = c.publishBatch(f, caller); err == nil {
			_ = c.sendFrame(c.ctx, b, nil, buf)
			return
		}
	case OpSubscribe:
		b, err = c.subscribe(f, caller)
	case OpUnsubscribe:
		b, err = c.unsubscribe(f)
	case OpReplay:
		b, err = c.replay(f, caller)
	case OpReceive:
		b, err = c.receive(f, caller)
	case OpAck, OpNack:
		b, err = c.settle(f, caller)
	}
	if err != nil {
		c.answer(f.ID, err)
		return
	}
	if b != nil {
		_ = c.send(c.ctx, b)
	}
}

func (c *conn) negotiate(f *Frame) ([]byte, error) {
	ttl, err := pigeon.TTLFromMillis(f.TTLMs)
	if err != nil {
		return nil, err
	}
	k, err := c.srv.e.Negotiate(c.ctx, c.principal, c.region, f.Subjects, ttl)
	if err != nil {
		return nil, err
	}
	info := k.Info()
	c.mu.Lock()
	c.caller = pigeon.Caller{Principal: c.principal, Region: info.Region, ContractID: info.ID}
	c.mu.Unlock()
	return c.contractAnswer(f.ID, info)
}

// renew moves the expiry of the contract the frame was read under later
// (pigeon.Engine.RenewContract): what runs under it, subscriptions
// included, goes on. The credential is the connection's: a renewal does
// not take the contract past its expiry.
func (c *conn) renew(f *Frame, caller pigeon.Caller) ([]byte, error) {
	if caller.ContractID == "" {
		return nil, pigeon.NewError(pigeon.CodeContractRequired, "no contract to renew: negotiate first")
	}
	ttl, err := pigeon.TTLFromMillis(f.TTLMs)
	if err != nil {
		return nil, err
	}
	k, err := c.srv.e.RenewContract(c.ctx, c.principal, caller.ContractID, ttl)
	if err != nil {
		return nil, err
	}
	return c.contractAnswer(f.ID, k.Info())
}

// contractAnswer is the contract frame answering frame id with info.
func (c *conn) contractAnswer(id string, info pigeon.ContractInfo) ([]byte, error) {
	body, err := json.Marshal(info)
	if err != nil {
		return nil, pigeon.WrapError(pigeon.CodeInternal, err, "encode contract")
	}
	b := appendHead(make([]byte, 0, 96+len(body)), OpContract, id)
	b = append(b, `,"maxFrame":`...)
	b = strconv.AppendInt(b, c.srv.opts.MaxFrame, 10)
	b = append(b, `,"contract":`...)
	b = append(b, body...)
	return append(b, '}'), nil
}

// message decodes the envelope of a publish or request frame.
func message(f *Frame) (*pigeon.Message, error) {
	if f.Message == nil {
		return nil, pigeon.NewError(pigeon.CodeEnvelopeInvalid, "message is required")
	}
	return f.Message, nil
}

// atDepth is caller publishing at the depth f asks for (its "hops"): a
// frame without one publishes at 0, as every client's; one with one is
// refused FORBIDDEN unless its principal holds pigeon.RoleBridge now
// (pigeon.Engine.MayPublishAtDepth), and the refusal audited (see
// depthDenied). m is the frame's message (nil for a batch, whose messages
// are not read yet). The message's own "hops" is never read: the broker
// writes it.
func (c *conn) atDepth(f *Frame, caller pigeon.Caller, m *pigeon.Message) (pigeon.Caller, error) {
	if f.Hops == 0 {
		return caller, nil
	}
	if !c.srv.e.MayPublishAtDepth(caller.Principal) {
		err := pigeon.NewError(pigeon.CodeForbidden, "publishing at a depth (\"hops\") requires the role %s", pigeon.RoleBridge)
		c.depthDenied(f, caller, m, err)
		return caller, err
	}
	caller.Hops = f.Hops
	return caller, nil
}

// depthDenied audits refused, a publish frame's depth refused to caller
// before the engine saw the message, as the HTTP server audits a
// refusal for want of a role: an access.denied record naming the
// principal, its contract and the operation ("ws publish hops", "ws
// publish_batch hops", "ws request hops"), coalesced per principal and code as those are.
// The subject is named only when the catalog has it (the sender may name
// any, and a new one each time would start a new run); the message id
// of a single publish is named too. The refusal stands whether or not its
// record is written.
func (c *conn) depthDenied(f *Frame, caller pigeon.Caller, m *pigeon.Message, refused *pigeon.Error) {
	rec := pigeon.AuditRecord{ContractID: caller.ContractID, Ref: "ws " + f.Op + " hops"}
	if caller.Principal != nil {
		rec.Principal = caller.Principal.ID
	}
	if m != nil {
		rec.MessageID = m.ID
		if _, err := c.srv.e.Subject(m.Subject); err == nil {
			rec.Subject = m.Subject
		}
	}
	_ = c.srv.e.Record(c.ctx, pigeon.EventAccessDenied, refused.Code, rec)
}

// rateDenied audits the refusal, past the connection's publish rate, of
// refused messages of f (a publish or request frame's one, or a batch's
// messages past the rate) before the engine saw them, as the engine
// audits its rate gate's refusals: a publish.denied record, RATE_LIMITED,
// naming the principal, its contract and where it was refused ("ws
// publish connection rate", "ws publish_batch connection rate: 2 of 5
// messages"), with no gate (the engine's rate gate did not judge it).
// See rateLimited for the rest, never the subject of a batch.
func (c *conn) rateDenied(f *Frame, refused int) {
	ref := "ws " + f.Op + " connection rate"
	var subject, id string
	if f.Op == OpPublishBatch {
		ref += ": " + strconv.Itoa(refused) + " of " + strconv.Itoa(len(f.Batch)) + " messages"
	} else if m := f.Message; m != nil {
		subject, id = m.Subject, m.ID
	}
	c.rateLimited(pigeon.EventPublishDenied, c.callerNow(), ref, subject, id)
}

// requestDenied audits a request frame f refused RATE_LIMITED, before it
// was published, by a bound of the server's on the requests waiting for
// their replies (where: "in flight", the connection's MaxInFlight of
// them; "bytes", its principal's MaxRequestBytesPerPrincipal), as a
// request refused at the engine's gates is audited, and as rateDenied
// audits one past the connection's publish rate: publish.denied, Ref "ws
// request in flight" or "ws request bytes", with the message's id. See
// rateLimited.
func (c *conn) requestDenied(f *Frame, caller pigeon.Caller, where string) {
	var subject, id string
	if m := f.Message; m != nil {
		subject, id = m.Subject, m.ID
	}
	c.rateLimited(pigeon.EventPublishDenied, caller, "ws request "+where, subject, id)
}

// readDenied audits a replay or receive frame f refused before its read,
// when err is RATE_LIMITED: the server's read pool had no room for it
// (MaxReadBytesInFlight, after waiting) or its principal's reads held
// their share (MaxReadBytesPerPrincipal), before anything was read,
// leased or settled. It is audited as the engine audits a replay or
// receive it refuses: replay.denied or receive.denied, Ref "ws replay
// read budget" or "ws receive read budget", and counted in
// Stats.RateLimited. See rateLimited. Any other err (REQUEST_TIMEOUT: the
// connection ended while the frame waited) is no refusal of the bound,
// leaves no record and is counted only in Stats.ReadsRefused.
func (c *conn) readDenied(f *Frame, caller pigeon.Caller, err error) {
	if pigeon.ErrorCode(err) != pigeon.CodeRateLimited {
		return
	}
	c.srv.stats.rateLimited.Add(1)
	ev := pigeon.EventReceiveDenied
	if f.Op == OpReplay {
		ev = pigeon.EventReplayDenied
	}
	c.rateLimited(ev, caller, "ws "+f.Op+" read budget", f.Subject, "")
}

// rateLimited writes the audit record of a frame refused RATE_LIMITED by
// a bound of the server's own, before the engine saw it: ev, outcome
// deny, the principal and the contract of caller (the connection's
// principal when caller has none), ref naming where it was refused, and
// no gate (no gate of the engine judged it). subject is named only when
// the catalog has it (the sender may name any, and a new one each time
// would start a new run), and messageID when the frame names one.
//
// The engine coalesces RATE_LIMITED refusals per event, principal,
// subject and code, whatever their Ref: a flood of refused frames writes
// the first of a run and, once its second has passed, one record counting
// the rest (the latest refusal's fields, Ref "coalesced:N last:<its
// ref>"), not one record each; refusals of one event and subject made at
// different places (the connection's publish rate and its requests in
// flight, say) share a run, whose count then says so ("coalesced:N (refs
// differ) last:ws request in flight").
// It runs on the goroutine that refused the frame (the read loop, or the
// frame's worker), holding no lock: a refusal within a run only counts;
// the first of a run waits for its write, as a gate's refusal does. The
// refusal stands whether or not its record is written.
func (c *conn) rateLimited(ev pigeon.Event, caller pigeon.Caller, ref, subject, messageID string) {
	rec := pigeon.AuditRecord{ContractID: caller.ContractID, Ref: ref, MessageID: messageID}
	if caller.Principal != nil {
		rec.Principal = caller.Principal.ID
	} else if c.principal != nil {
		rec.Principal = c.principal.ID
	}
	if subject != "" {
		if _, err := c.srv.e.Subject(subject); err == nil {
			rec.Subject = subject
		}
	}
	_ = c.srv.e.Record(c.ctx, ev, pigeon.CodeRateLimited, rec)
}

func (c *conn) publish(f *Frame, caller pigeon.Caller) ([]byte, error) {
	m, err := message(f)
	if err != nil {
		return nil, err
	}
	if caller, err = c.atDepth(f, caller, m); err != nil {
		return nil, err
	}
	res, err := c.srv.e.Publish(c.ctx, caller, m)
	if err != nil {
		return nil, err
	}
	b := appendHead(make([]byte, 0, answerSize(res, f.Brief)), OpDecision, f.ID)
	b = append(b, `,"status":`...)
	b = jsontext.AppendString(b, res.Status)
	b = append(b, `,"message":`...)
	b = appendResultMessage(b, res, f.Brief)
	return append(b, '}'), nil
}

// answerSize is room enough for the answer to a publish with result r,
// most of the time: a brief answer leaves an accepted message's data out.
func answerSize(r *pigeon.Result, brief bool) int {
	if brief && r.Status == pigeon.StatusAccepted {
		return 576
	}
	return 576 + len(r.Message.Data)
}

// appendResultMessage appends the message of a publish's answer: brief
// (an accepted message without its data, which the publisher sent) when
// the frame asked for it.
func appendResultMessage(b []byte, res *pigeon.Result, brief bool) []byte {
	if brief {
		return res.AppendBriefJSON(b)
	}
	return res.AppendMessageJSON(b)
}

// request publishes a request and answers with its reply. held is what
// the request counts toward its principal's MaxRequestBytesPerPrincipal
// (Server.holdRequest), given back once it no longer waits.
func (c *conn) request(f *Frame, caller pigeon.Caller, held int64) {
	released := false
	release := func() {
		if !released {
			released = true
			c.srv.releaseRequest(c.principal.ID, held)
		}
	}
	defer release()
	m, err := message(f)
	if err != nil {
		c.answer(f.ID, err)
		return
	}
	// A request is published (admitted, stored, delivered) as a publish
	// is: its depth follows the publish frame's rule.
	if caller, err = c.atDepth(f, caller, m); err != nil {
		c.answer(f.ID, err)
		return
	}
	timeout, err := pigeon.MillisField("timeoutMs", f.TimeoutMs)
	if err != nil {
		c.answer(f.ID, err)
		return
	}
	if timeout == 0 {
		timeout = DefaultRequestTimeout
	}
	timeout = min(timeout, c.srv.opts.MaxRequestTimeout)
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	reply, err := c.srv.e.Request(ctx, caller, m)
	cancel()
	release() // its answer waits in the write budgets, not here
	if err != nil {
		c.answer(f.ID, err)
		return
	}
	b := appendHead(make([]byte, 0, 512+len(reply.Data)), OpReply, f.ID)
	b = append(b, `,"message":`...)
	b = reply.AppendJSON(b)
	_ = c.sendGuarded(c.ctx, append(b, '}'), &guard{caller: caller, subject: m.Subject, op: pigeon.OpPublish, re: f.ID})
}

// replay answers a replay frame. Its messages and their answer hold room
// in the server's read pool until the answer is queued.
func (c *conn) replay(f *Frame, caller pigeon.Caller) ([]byte, error) {
	who := readpool.KeyOf(c.principal, pigeon.Source{})
	held, err := c.srv.reads.Reserve(c.ctx, who, readpool.ReadReserve(c.srv.e))
	if err != nil {
		c.readDenied(f, caller, err)
		return nil, err
	}
	defer func() { c.srv.reads.Resize(who, held, 0) }()
	msgs, err := c.srv.e.Replay(c.ctx, caller, pigeon.ReplayRequest{Subject: f.Subject, Reason: f.Reason,
		FromSequence: f.FromSequence, ToSequence: f.ToSequence, Max: f.Max})
	if err != nil {
		return nil, err
	}
	b := appendMessages(appendHead(nil, OpMessages, f.ID), msgs)
	held = c.srv.reads.Resize(who, held, int64(len(b)))
	_ = c.sendGuarded(c.ctx, b, &guard{caller: caller, subject: f.Subject, op: pigeon.OpReplay, re: f.ID})
	return nil, nil
}

// receive answers a pull. When the answer cannot be queued (the
// connection is going away), leased messages go back to the group at once
// instead of waiting out their ack wait under a lease nobody saw.
func (c *conn) receive(f *Frame, caller pigeon.Caller) ([]byte, error) {
	who := readpool.KeyOf(c.principal, pigeon.Source{})
	held, err := c.srv.reads.Reserve(c.ctx, who, readpool.ReadReserve(c.srv.e))
	if err != nil {
		c.readDenied(f, caller, err)
		return nil, err
	}
	defer func() { c.srv.reads.Resize(who, held, 0) }()
	msgs, attempts, err := c.srv.e.ReceiveAttempts(c.ctx, caller, f.Subject, f.Max)
	if err != nil {
		return nil, err
	}
	b := appendPulled(appendHead(nil, OpMessages, f.ID), msgs, attempts)
	held = c.srv.reads.Resize(who, held, int64(len(b)))
	g := &guard{caller: caller, subject: f.Subject, op: pigeon.OpReceive, re: f.ID}
	if err := c.sendGuarded(c.ctx, b, g); err != nil && len(msgs) > 0 {
		ctx := context.WithoutCancel(c.ctx)
		for i, m := range msgs {
			// Not leased on a pubsub subject: nothing to give back there.
			// The attempt leaves alone a lease taken again meanwhile.
			_ = c.srv.e.NackAttempt(ctx, caller, f.Subject, m.ID, m.Sequence, attempts[i], 0)
		}
	}
	return nil, nil
}

// subscribeOptions turns a subscribe frame into engine options.
func subscribeOptions(f *Frame) ([]pigeon.SubscribeOption, error) {
	var opts []pigeon.SubscribeOption
	if f.Selector != "" {
		opts = append(opts, pigeon.WithSelector(f.Selector))
	}
	if f.Filter != "" {
		opts = append(opts, pigeon.WithFilter(f.Filter))
	}
	if f.Group != "" {
		opts = append(opts, pigeon.WithGroup(f.Group))
	}
	switch f.Ack {
	case "", AckExplicit:
	case AckNone:
		opts = append(opts, pigeon.WithAtMostOnce())
	default:
		return nil, pigeon.NewError(pigeon.CodeInvalidArgument, `ack must be %q or %q`, AckExplicit, AckNone)
	}
	// The engine's in-flight bound is the window: how many deliveries may
	// be on the wire unanswered. A v1 client sends no window; its bound is
	// its maxInFlight, as before.
	w := f.MaxInFlight
	if f.Window != 0 {
		if f.Window < 0 || f.MaxInFlight < 0 {
			return nil, pigeon.NewError(pigeon.CodeInvalidArgument, "window and maxInFlight must be positive")
		}
		w = max(f.Window, f.MaxInFlight)
	}
	if w != 0 {
		opts = append(opts, pigeon.WithMaxInFlight(w))
	}
	if len(f.Start) > 0 {
		var st pigeon.Start
		if err := json.Unmarshal(f.Start, &st); err != nil {
			var pe *pigeon.Error
			if errors.As(err, &pe) {
				return nil, pe
			}
			return nil, pigeon.NewError(pigeon.CodeInvalidArgument, `start must be "new", "first" or {"sequence": N}`)
		}
		opts = append(opts, pigeon.WithStart(st))
	}
	return opts, nil
}

func (c *conn) subscribe(f *Frame, caller pigeon.Caller) ([]byte, error) {
	opts, err := subscribeOptions(f)
	if err != nil {
		return nil, err
	}
	ackWait := pigeon.DefaultAckWait
	if p, err := c.srv.e.Subject(f.Subject); err == nil && p.Delivery.AckWaitMs > 0 {
		ackWait = time.Duration(p.Delivery.AckWaitMs) * time.Millisecond
	}
	ss := newServerSub(c, caller, ackWait, f.Ack == AckNone)
	if f.BatchDeliveries {
		ss.batch = true
		opts = append(opts, pigeon.WithFlush(ss.flush))
	}
	if !ss.atMost {
		opts = append(opts, pigeon.WithLeaseLost(ss.leaseLost))
	}
	sub, err := c.srv.e.SubscribeAsync(c.ctx, caller, f.Subject, ss.handle, opts...)
	if err != nil {
		return nil, err
	}
	ss.start(sub)
	b := appendHead(make([]byte, 0, 64), OpSubscribed, f.ID)
	b = append(b, `,"sub":`...)
	b = jsontext.AppendString(b, sub.ID())
	if p, ok := sub.(interface{ From() uint64 }); ok && p.From() > 0 {
		b = append(b, `,"from":`...)
		b = strconv.AppendUint(b, p.From(), 10)
	}
	b = append(b, '}')
	// The answer is queued before the subscription may push: the client
	// learns the sub id before its first delivery.
	err = c.send(c.ctx, b)
	ss.ready()
	if err != nil {
		ss.end()
	}
	return nil, nil
}

func (c *conn) unsubscribe(f *Frame) ([]byte, error) {
	c.mu.Lock()
	ss := c.subs[f.Sub]
	c.mu.Unlock()
	// Two unsubscribes of one subscription may run at once (each frame
	// takes its own slot): the first ends it, the second is refused as
	// for a subscription already gone.
	if ss == nil || !ss.ended.CompareAndSwap(false, true) {
		return nil, pigeon.NewError(pigeon.CodeBadRequest, "unknown subscription %q", f.Sub)
	}
	ss.unsubscribe()
	return encodeSimple(OpOK, f.ID), nil
}

// settleSub answers an ack or nack of subscription deliveries: one
// (messageId) or many (messageIds), each at the sequence it was handed
// over at when the frame names it (sequence; sequences, in step with
// messageIds). The answer is ok when every one was waiting; ids that were
// not (already settled, their ack wait passed, their cluster lease was
// lost, or handed over at another sequence) are named in the ok's
// notPending, or, for a single id, refused with ACK_NOT_ALLOWED. When any
// of those answers named a
// sequence, notPendingSequences gives, in step with notPending, the
// sequence each named (0: none): one id answered at two sequences, one
// settled and one not, is then told apart.
func (c *conn) settleSub(f *Frame) {
	if f.MessageID == "" && len(f.MessageIDs) == 0 {
		c.answer(f.ID, pigeon.NewError(pigeon.CodeBadRequest, "messageId or messageIds is required"))
		return
	}
	if err := checkSequences(f); err != nil {
		c.answer(f.ID, err)
		return
	}
	c.mu.Lock()
	ss := c.subs[f.Sub]
	c.mu.Unlock()
	if ss == nil {
		c.answer(f.ID, pigeon.NewError(pigeon.CodeBadRequest, "unknown subscription %q", f.Sub))
		return
	}
	a := answer{ok: f.Op == OpAck, delay: -1}
	if f.DelayMs != nil {
		d, err := pigeon.RetryDelayMillis(*f.DelayMs)
		if err != nil {
			c.answer(f.ID, err)
			return
		}
		a.delay = d
	}
	if len(f.MessageIDs) == 0 {
		if !ss.settle(f.MessageID, f.Sequence, a) {
			c.answer(f.ID, pigeon.NewError(pigeon.CodeAckNotAllowed, "no delivery of %s awaits an answer on %s (already settled, its ack wait passed, its cluster lease was lost, or handed over at another sequence)", f.MessageID, f.Sub))
			return
		}
		_ = c.send(c.ctx, encodeSimple(OpOK, f.ID))
		return
	}
	stale, seqs := ss.settleAll(f.MessageIDs, f.Sequences, f.MessageID, f.Sequence, a)
	b := appendHead(make([]byte, 0, 32+len(f.ID)), OpOK, f.ID)
	if len(stale) > 0 {
		b = append(b, `,"notPending":[`...)
		for i, id := range stale {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsontext.AppendString(b, id)
		}
		b = append(b, ']')
	}
	if slices.ContainsFunc(seqs, func(s uint64) bool { return s != 0 }) {
		b = append(b, `,"notPendingSequences":[`...)
		for i, s := range seqs {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, s, 10)
		}
		b = append(b, ']')
	}
	_ = c.send(c.ctx, append(b, '}'))
}

// checkSequences refuses an ack or nack frame whose sequences do not go
// in step with its messageIds, or name a sequence with no id.
func checkSequences(f *Frame) error {
	switch {
	case f.Sequences != nil && len(f.Sequences) != len(f.MessageIDs):
		return pigeon.NewError(pigeon.CodeBadRequest, "sequences must hold one sequence per messageIds entry")
	case f.Sequence != 0 && f.MessageID == "":
		return pigeon.NewError(pigeon.CodeBadRequest, "sequence names the sequence of messageId, which is missing")
	}
	return nil
}

// settle acks or nacks a message taken with receive, at the sequence the
// frame names (sequence; 0 or absent: none, see Engine.AckSequence) and
// under the lease attempt it names (attempt, as the receive's answer gave
// it; 0 or absent: none, any lease of the principal, see
// Engine.AckAttempt).
func (c *conn) settle(f *Frame, caller pigeon.Caller) ([]byte, error) {
	if f.MessageID == "" {
		return nil, pigeon.NewError(pigeon.CodeBadRequest, "messageId is required")
	}
	if f.Sequences != nil {
		return nil, pigeon.NewError(pigeon.CodeBadRequest, "sequences applies to the messageIds of a subscription's deliveries")
	}
	var err error
	if f.Op == OpAck {
		err = c.srv.e.AckAttempt(c.ctx, caller, f.Subject, f.MessageID, f.Sequence, f.Attempt)
	} else {
		delay := time.Duration(-1) // the subject's backoff
		if f.DelayMs != nil {
			if delay, err = pigeon.RetryDelayMillis(*f.DelayMs); err != nil {
				return nil, err
			}
		}
		err = c.srv.e.NackAttempt(c.ctx, caller, f.Subject, f.MessageID, f.Sequence, f.Attempt, delay)
	}
	if err != nil {
		return nil, err
	}
	return encodeSimple(OpOK, f.ID), nil
}
