package pigeon

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"pigeon/store"
)

// Receive pulls messages for the caller. On a pubsub subject every
// principal has its own cursor and each message is returned once. On a
// work-queue or request/reply subject, messages are leased to the caller
// for the subject's ack wait: one that is not acked in time is returned
// again (to this or another receiver) until its attempts run out.
func (e *Engine) Receive(ctx context.Context, c Caller, subjectName string, max int) ([]*Message, error) {
	out, _, err := e.receive(ctx, c, subjectName, max, false)
	return out, err
}

// ReceiveAttempts is Receive that also returns, in step with the
// messages, the attempt of each one's lease (1 for its first delivery, as
// Delivery.Attempt counts); on a pubsub subject, where nothing is leased,
// each is 0. AckAttempt and NackAttempt take it back: a consumer that
// answers late then settles nothing once the message was leased again,
// even to another receiver of its own principal.
func (e *Engine) ReceiveAttempts(ctx context.Context, c Caller, subjectName string, max int) ([]*Message, []int, error) {
	return e.receive(ctx, c, subjectName, max, false)
}

// ReceiveSettled is Receive for consumers that do not ack, as the
// reference broker's HTTP pull: on a work-queue or request/reply subject
// the messages handed out are done for the caller's group at once, in one
// store write, under the receive grant alone; nothing is leased, nothing
// comes back. On a pubsub subject it is Receive.
func (e *Engine) ReceiveSettled(ctx context.Context, c Caller, subjectName string, max int) ([]*Message, error) {
	out, _, err := e.receive(ctx, c, subjectName, max, true)
	return out, err
}

func (e *Engine) receive(ctx context.Context, c Caller, subjectName string, max int, settle bool) ([]*Message, []int, error) {
	start := e.since()
	if !e.ops.enter() { // Shutdown waits for the delivery records (inflight.go)
		return nil, nil, errShutdown()
	}
	defer e.ops.leave()
	if err := e.auditGuard(ctx); err != nil {
		return nil, nil, err
	}
	s := e.subject(subjectName)
	if s == nil {
		return nil, nil, NewError(CodeSubjectNotFound, "unknown subject %q", subjectName)
	}
	k, code, reason := e.checkContract(ctx, c.ContractID, c.Principal, s, OpReceive)
	if code != CodeOK {
		return nil, nil, e.contractError(ctx, EventReceiveDenied, c.Principal, s.name, c.ContractID, code, reason)
	}
	scope := k.permits[s.name]
	if max <= 0 || max > e.opts.MaxReplay {
		max = e.opts.MaxReplay
	}
	var (
		out       []*Message
		attempts  []int
		err       error
		pullGroup = consumerGroup(scope, nil, Selector{}, nil)
	)
	still := func() error { return e.stillAllowed(ctx, c, s, OpReceive, EventReceiveDenied) }
	switch {
	case s.mode == ModePubSub:
		out, err = e.receiveCursor(ctx, c, s, max, scope, still)
		attempts = make([]int, len(out))
	default:
		out, attempts, err = e.receiveLeased(ctx, c, s, pullGroup, c.Principal.ID, max, scope)
		if err != nil {
			// What was leased before the store failed is never handed
			// over: back at once, uncounted.
			e.giveBack(ctx, s, pullGroup, c.Principal.ID, out)
		} else {
			if err = still(); err != nil {
				e.giveBack(ctx, s, pullGroup, c.Principal.ID, out)
			} else if settle {
				out, attempts, err = e.settleReceived(ctx, c, s, pullGroup, out, attempts)
			}
		}
	}
	if err != nil {
		return nil, nil, err
	}
	var log deliveryLog
	log.addAll(out)
	base := store.AuditRecord{Subject: s.name, Principal: c.Principal.ID, ContractID: c.ContractID, PolicyID: s.policyID}
	acked := settle && s.mode != ModePubSub
	log.record(EventDeliveryDispatched, OutcomeAllow, base, func(r store.AuditRecord) {
		e.auditAsync(r)
		if acked {
			r.Type = string(EventDeliveryAcked)
			e.auditAsync(r)
		}
	})
	e.tookEach(StageDeliver, s.name, len(out), start)
	return out, attempts, nil
}

// settleReceived marks msgs, just leased to c's principal in group, done
// in one write, and returns what is handed out: msgs, attempts in step. A
// message whose lease holder changed meanwhile is left alone.
//
// In a cluster-shared group each one's cluster lease is settled first
// (markDoneAll). One the cluster refuses (ACK_NOT_ALLOWED: its lease ran
// out here before the settle, and another node took it over and runs it,
// or settled it) is not handed out, and its refusal is audited ack.denied,
// as a pull consumer's late ack is (AckAttempt) and a handler's answer on
// a lost lease (refusedAnswer): handed out, it ran here while the other
// node's consumer ran it too.
//
// When the store fails to record them, a message left not done is not
// handed out: its lease goes back to the group at once, its attempt given
// back, as the leases of a receive that fails before its write are
// (giveBack); before, it stayed leased to the caller, who was never
// handed it, until its ack wait ran out, an attempt spent. A message
// that stands settled all the same (unrecorded: recorded before the
// failure, or settled in the cluster) is done for the group and would be
// lost were it not handed out: the call then hands those out, and the
// failure is logged; when none does, the call fails with the store's
// error.
func (e *Engine) settleReceived(ctx context.Context, c Caller, s *subject, group string, msgs []*Message, attempts []int) ([]*Message, []int, error) {
	if len(msgs) == 0 {
		return msgs, attempts, nil
	}
	g, err := e.group(ctx, store.GroupKey{Subject: s.name, Group: group})
	if err != nil {
		return nil, nil, err
	}
	defer e.releaseGroup(g)
	refused, back, err := e.settleReceivedLocked(ctx, g, c.Principal.ID, msgs)
	if len(back) > 0 {
		e.pokeGroup(s.name) // the group's other consumers look again
	}
	if err == nil && len(refused) == 0 {
		return msgs, attempts, nil
	}
	gone := make(map[uint64]bool, len(refused)+len(back))
	for _, seq := range back {
		gone[seq] = true
	}
	for _, seq := range refused {
		gone[seq] = true
	}
	var (
		out  []*Message
		atts []int
	)
	for i, m := range msgs {
		if !gone[m.Sequence] {
			out, atts = append(out, m), append(atts, attempts[i])
		}
	}
	for _, m := range msgs {
		if slices.Contains(refused, m.Sequence) {
			e.auditAsync(EventAckDenied.record(OutcomeDeny, CodeAckNotAllowed, store.AuditRecord{Subject: s.name, Principal: c.Principal.ID, ContractID: c.ContractID, MessageID: m.ID, Seqs: seqText(m.Sequence)}))
		}
	}
	if err == nil {
		return out, atts, nil
	}
	if len(out) == 0 {
		return nil, nil, err
	}
	e.opts.Logger.Warn("pigeon: recording received messages done failed; those it left not done go back to the group",
		"subject", s.name, "handedOut", len(out), "back", len(back), "err", err)
	return out, atts, nil
}

// settleReceivedLocked is settleReceived's work under g's lock: it
// returns the sequences of msgs the cluster refused to settle
// (markDoneAll), the store's failure, and the sequences it gave back
// (unrecorded).
func (e *Engine) settleReceivedLocked(ctx context.Context, g *group, holder string, msgs []*Message) (refused, back []uint64, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	seqs := make([]uint64, 0, len(msgs))
	for _, m := range msgs {
		if l := g.leases[m.Sequence]; l != nil && l.holder == holder {
			seqs = append(seqs, m.Sequence)
		}
	}
	if refused, err = e.markDoneAll(ctx, g, seqs); err != nil {
		_, back = e.unrecorded(context.WithoutCancel(ctx), g, holder, seqs, true, e.now())
	}
	return refused, back, err
}

// receiveCursor hands out up to max messages of a pubsub subject after
// the principal's pull cursor and moves the cursor past them. The cursor
// reads on from next, past the messages it has handed out: once
// retention trimmed messages it had not read, those it reads after them
// are done above its floor (which only moves over contiguous sequences),
// and reading from the floor would hand them out again.
func (e *Engine) receiveCursor(ctx context.Context, c Caller, s *subject, max int, scope *permit, still func() error) ([]*Message, error) {
	g, err := e.group(ctx, cursorKey(s.name, c.Principal.ID))
	if err != nil {
		return nil, err
	}
	defer e.releaseGroup(g)
	g.mu.Lock()
	defer g.mu.Unlock()
	sms, err := e.readBudget(ctx, s.name, g.next, max, e.opts.MaxReadBytes)
	if err != nil {
		return nil, storeError(err)
	}
	// A cursor reads its subject in order, so every sequence below next,
	// and below the first one read, was handed out or trimmed: its floor
	// goes past them, and moves on with what it hands out. This asks the
	// store nothing when the floor is where it should be (loadGroup leaves
	// cursors to this).
	floor := g.next - 1
	if len(sms) > 0 && sms[0].Seq-1 > floor {
		floor = sms[0].Seq - 1
	}
	if err := e.raiseFloor(ctx, g, floor); err != nil {
		return nil, storeError(err)
	}
	out := make([]*Message, 0, len(sms))
	seqs := make([]uint64, 0, len(sms))
	for _, sm := range sms {
		seqs = append(seqs, sm.Seq)
		d, err := e.decode(sm)
		if err != nil {
			e.opts.Logger.Error("receive: a stored message does not decode; skipped", "subject", s.name, "seq", sm.Seq)
			continue
		}
		if scope.inScope(OpReceive, d.value()) {
			out = append(out, d.m.Clone())
		}
	}
	// Nothing is handed out, and the cursor stays, if the contract no
	// longer allows it.
	if err := still(); err != nil {
		return nil, err
	}
	// The cursor moves past what is handed out, in one durable write (a
	// cursor is not shared in a cluster: nothing is refused).
	if _, err := e.markDoneAll(ctx, g, seqs); err != nil {
		return nil, err
	}
	if len(seqs) > 0 {
		g.next = seqs[len(seqs)-1] + 1
	}
	return out, nil
}

// receiveLeased hands out up to max messages of group to holder under
// lease, and the attempt of each lease.
func (e *Engine) receiveLeased(ctx context.Context, c Caller, s *subject, groupName, holder string, max int, scope *permit) ([]*Message, []int, error) {
	g, err := e.group(ctx, store.GroupKey{Subject: s.name, Group: groupName})
	if err != nil {
		return nil, nil, err
	}
	defer e.releaseGroup(g)
	var match func(*decoded) bool
	if scope.scoped(OpReceive) {
		match = func(d *decoded) bool { return scope.inScope(OpReceive, d.value()) }
	}
	// Each lease names the contract it is taken under, so that revoking
	// the contract gives it back (releaseRevoked).
	ds, err := e.leaseBatch(ctx, g, s, holder, c.ContractID, max, e.opts.MaxReadBytes, false, match)
	out := make([]*Message, len(ds))
	attempts := make([]int, len(ds))
	g.mu.Lock()
	for i, d := range ds {
		out[i] = d.m.Clone()
		// The lease just taken is still holder's (its ack wait runs);
		// should it have ended meanwhile, the attempt counted for it.
		if l := g.leases[d.seq]; l != nil && l.holder == holder {
			attempts[i] = l.attempt
		} else {
			attempts[i] = g.attempts[d.seq]
		}
	}
	g.mu.Unlock()
	return out, attempts, err
}

// Ack acknowledges a received message. Acking twice is a no-op. On a
// work-queue or request/reply subject, only the current lease holder may
// ack (ACK_NOT_ALLOWED otherwise); on a pubsub subject, only a message
// the caller's pull cursor handed it (ACK_NOT_ALLOWED otherwise), since
// the ack is recorded as its receipt.
//
// A message id names one message at a time only: once retention trims a
// message its id is free, and a message published later under it is
// another message. Ack settles whichever message holds the id now; a
// consumer that may answer late should use AckSequence.
func (e *Engine) Ack(ctx context.Context, c Caller, subjectName, messageID string) error {
	return e.AckSequence(ctx, c, subjectName, messageID, 0)
}

// AckSequence is Ack of the message messageID at sequence seq, the
// Message.Sequence it was received with: when the id now names a message
// at another sequence (the one received was trimmed, and its id taken by
// a newer message), nothing is settled and the answer is ACK_NOT_ALLOWED.
// A seq of 0 names no sequence: it is Ack.
func (e *Engine) AckSequence(ctx context.Context, c Caller, subjectName, messageID string, seq uint64) error {
	return e.AckAttempt(ctx, c, subjectName, messageID, seq, 0)
}

// AckAttempt is AckSequence of the lease attempt the message was received
// under (ReceiveAttempts): on a work-queue or request/reply subject, when
// the message's lease is now another attempt (the one received ran out
// and the message was leased again, to this principal or another), nothing
// is settled and the answer is ACK_NOT_ALLOWED, as for a lease held by
// another principal. An attempt of 0 names none: the ack then settles
// whichever lease the caller's principal holds, as Ack does (protocol v1).
// On a pubsub subject, where nothing is leased, the attempt is not looked
// at. A negative attempt is INVALID_ARGUMENT. In a cluster, an ack whose
// lease ran out and was taken over by another node (Leaser.Release
// refuses it) settles nothing either, ACK_NOT_ALLOWED, even while this
// node has not yet taken the lease back.
func (e *Engine) AckAttempt(ctx context.Context, c Caller, subjectName, messageID string, seq uint64, attempt int) error {
	if !e.ops.enter() { // Shutdown waits for its record (inflight.go)
		return errShutdown()
	}
	defer e.ops.leave()
	if err := checkAttempt(attempt); err != nil {
		return err
	}
	s, sm, g, scope, err := e.settleTarget(ctx, c, subjectName, messageID, seq, EventAckDenied)
	if err != nil {
		return err
	}
	if g == nil { // pubsub: the cursor already moved; the ack is recorded
		if !e.pulled(ctx, c, s, sm, scope) {
			e.audit(ctx, EventAckDenied.record(OutcomeDeny, CodeAckNotAllowed, store.AuditRecord{Subject: s.name, Principal: c.Principal.ID, ContractID: c.ContractID, MessageID: sm.ID, Seqs: seqText(sm.Seq)}))
			return NewError(CodeAckNotAllowed, "message %s was not received by this consumer", sm.ID)
		}
		e.audit(ctx, EventDeliveryAcked.record(OutcomeAllow, CodeOK, store.AuditRecord{Subject: s.name, Principal: c.Principal.ID, ContractID: c.ContractID, MessageID: sm.ID, Seqs: seqText(sm.Seq)}))
		return nil
	}
	defer e.releaseGroup(g)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.prog.IsDone(sm.Seq) {
		return nil
	}
	if l := g.leases[sm.Seq]; !l.heldBy(c.Principal.ID, attempt) {
		e.audit(ctx, EventAckDenied.record(OutcomeDeny, CodeAckNotAllowed, store.AuditRecord{Subject: s.name, Principal: c.Principal.ID, ContractID: c.ContractID, MessageID: sm.ID, Seqs: seqText(sm.Seq)}))
		return NewError(CodeAckNotAllowed, "message %s is not leased to this consumer", sm.ID)
	}
	refused, err := e.markDoneAll(ctx, g, []uint64{sm.Seq})
	if len(refused) > 0 {
		// The lease ran out in the cluster, and another node took the
		// message over (or settled it): this ack settles nothing.
		e.audit(ctx, EventAckDenied.record(OutcomeDeny, CodeAckNotAllowed, store.AuditRecord{Subject: s.name, Principal: c.Principal.ID, ContractID: c.ContractID, MessageID: sm.ID, Seqs: seqText(sm.Seq)}))
		return NewError(CodeAckNotAllowed, "message %s is no longer leased to this consumer: its lease ran out and another node took the message over", sm.ID)
	}
	if err != nil {
		return err
	}
	e.audit(ctx, EventDeliveryAcked.record(OutcomeAllow, CodeOK, store.AuditRecord{Subject: s.name, Principal: c.Principal.ID, ContractID: c.ContractID, MessageID: sm.ID, Seqs: seqText(sm.Seq)}))
	return nil
}

// Nack gives a leased message back for redelivery after delay (the
// subject's backoff when delay < 0). A delay above MaxRetryDelay is
// refused with CodeInvalidArgument. Only the lease holder may nack: a
// message leased to another consumer, or to none, is ACK_NOT_ALLOWED,
// audited as nack.denied as Ack's refusal is as ack.denied. Like Ack, it
// names whichever message holds the id now; see NackSequence.
func (e *Engine) Nack(ctx context.Context, c Caller, subjectName, messageID string, delay time.Duration) error {
	return e.NackSequence(ctx, c, subjectName, messageID, 0, delay)
}

// NackSequence is Nack of the message messageID at sequence seq, as
// AckSequence is Ack: when the id now names a message at another
// sequence, nothing changes and the answer is ACK_NOT_ALLOWED. A seq of 0
// names no sequence: it is Nack.
func (e *Engine) NackSequence(ctx context.Context, c Caller, subjectName, messageID string, seq uint64, delay time.Duration) error {
	return e.NackAttempt(ctx, c, subjectName, messageID, seq, 0, delay)
}

// NackAttempt is NackSequence of the lease attempt the message was
// received under, as AckAttempt is AckSequence: when the message's lease
// is now another attempt, nothing changes (the newer lease holds) and the
// answer is ACK_NOT_ALLOWED. An attempt of 0 names none: it is
// NackSequence.
func (e *Engine) NackAttempt(ctx context.Context, c Caller, subjectName, messageID string, seq uint64, attempt int, delay time.Duration) error {
	if !e.ops.enter() { // Shutdown waits for its record (inflight.go)
		return errShutdown()
	}
	defer e.ops.leave()
	if err := checkRetryDelay(delay); err != nil {
		return err
	}
	if err := checkAttempt(attempt); err != nil {
		return err
	}
	s, sm, g, _, err := e.settleTarget(ctx, c, subjectName, messageID, seq, EventNackDenied)
	if err != nil {
		return err
	}
	if g == nil {
		return NewError(CodeBadRequest, "nack applies to work-queue and request/reply subjects")
	}
	defer e.releaseGroup(g)
	nacked := false
	defer func() {
		if nacked { // after g.mu: the group's other consumers look again
			e.pokeGroup(s.name)
		}
	}()
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.leases[sm.Seq]
	if !l.heldBy(c.Principal.ID, attempt) {
		if g.prog.IsDone(sm.Seq) {
			return nil
		}
		e.audit(ctx, EventNackDenied.record(OutcomeDeny, CodeAckNotAllowed, store.AuditRecord{Subject: s.name, Principal: c.Principal.ID, ContractID: c.ContractID, MessageID: sm.ID, Seqs: seqText(sm.Seq)}))
		return NewError(CodeAckNotAllowed, "message %s is not leased to this consumer", sm.ID)
	}
	if delay < 0 {
		delay = e.retryDelay(s, l.attempt, nil)
	}
	l.free(e.now().Add(delay))
	// The cluster-wide lease ends with the delay too, as a push handler's
	// failure ends it (settle): otherwise every other node would see the
	// message held here until the ack wait it was leased for ran out.
	e.releaseShared(ctx, g, false, l.deadline, sm.Seq)
	nacked = true
	e.audit(ctx, EventDeliveryNacked.record(OutcomeDeny, CodeOK, store.AuditRecord{Subject: s.name, Principal: c.Principal.ID, ContractID: c.ContractID, MessageID: sm.ID, Seqs: seqText(sm.Seq)}))
	return nil
}

// checkAttempt refuses a negative lease attempt (INVALID_ARGUMENT); 0
// names none.
func checkAttempt(attempt int) error {
	if attempt < 0 {
		return NewError(CodeInvalidArgument, "attempt must not be negative")
	}
	return nil
}

// settleTarget resolves what a pull ack or nack names: the subject (with
// the contract granting ack), the stored message, the caller's pull
// group, held (releaseGroup) — nil on a pubsub subject, where pulls move a
// cursor instead — and the contract's permit on the subject. A seq other
// than 0 must be the stored message's: a message at another sequence
// holds the id now, not the one the caller received, and the answer is
// ACK_NOT_ALLOWED (audited as deniedType).
func (e *Engine) settleTarget(ctx context.Context, c Caller, subjectName, messageID string, seq uint64, deniedType Event) (*subject, store.Message, *group, *permit, error) {
	if e.closed.Load() {
		return nil, store.Message{}, nil, nil, errShutdown()
	}
	s := e.subject(subjectName)
	if s == nil {
		return nil, store.Message{}, nil, nil, NewError(CodeSubjectNotFound, "unknown subject %q", subjectName)
	}
	k, code, reason := e.checkContract(ctx, c.ContractID, c.Principal, s, OpAck)
	if code != CodeOK {
		return nil, store.Message{}, nil, nil, e.contractError(ctx, deniedType, c.Principal, s.name, c.ContractID, code, reason)
	}
	scope := k.permits[s.name]
	sm, err := e.store.Lookup(ctx, messageID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && (sm.Subject != s.name || !e.inReceiveScope(sm, scope))) {
		// A message outside the routes the caller may receive is answered
		// as one never seen: the answer does not tell that it exists.
		return nil, store.Message{}, nil, nil, NewError(CodeMessageNotFound, "no message %q on subject %s", messageID, s.name)
	}
	if err != nil {
		return nil, store.Message{}, nil, nil, storeError(err)
	}
	if seq != 0 && sm.Seq != seq {
		// The record names the message the caller answered: its id and
		// the sequence it gave, not the newer message holding the id.
		e.audit(ctx, deniedType.record(OutcomeDeny, CodeAckNotAllowed, store.AuditRecord{Subject: s.name, Principal: c.Principal.ID, ContractID: c.ContractID, MessageID: sm.ID, Seqs: seqText(seq)}))
		return nil, store.Message{}, nil, nil, NewError(CodeAckNotAllowed, "message %s at sequence %d is gone: its id names another message now", messageID, seq)
	}
	if s.mode == ModePubSub {
		return s, sm, nil, scope, nil
	}
	g, err := e.group(ctx, store.GroupKey{Subject: s.name, Group: consumerGroup(scope, nil, Selector{}, nil)})
	if err != nil {
		return nil, store.Message{}, nil, nil, err
	}
	return s, sm, g, scope, nil
}

// seqText is the Seqs of the audit record of one message named by its id
// (delivery.acked, delivery.nacked, delivery.exhausted, ack.denied,
// nack.denied), as of its publish.accepted record: its sequence alone, in
// decimal, and no count, so that a receipt names the message the record
// is of even after retention freed its id for a newer message. A sequence
// of 0 (none known) leaves it empty.
func seqText(seq uint64) string {
	if seq == 0 {
		return ""
	}
	return strconv.FormatUint(seq, 10)
}

// pulled reports whether c's pull cursor on the pubsub subject s handed
// sm out: the cursor is past it and it lies within the routes c's receive
// is scoped to. An ack of anything else would put c's name on a receipt
// (delivery.acked) of a message it never received.
func (e *Engine) pulled(ctx context.Context, c Caller, s *subject, sm store.Message, scope *permit) bool {
	g, err := e.group(ctx, cursorKey(s.name, c.Principal.ID))
	if err != nil {
		return false
	}
	defer e.releaseGroup(g)
	g.mu.Lock()
	past := sm.Seq < g.next
	g.mu.Unlock()
	return past && e.inReceiveScope(sm, scope)
}

// inReceiveScope reports whether sm lies within the routes scope lets its
// holder receive: always when the receive is not scoped, and never when
// sm's data does not decode.
func (e *Engine) inReceiveScope(sm store.Message, scope *permit) bool {
	if !scope.scoped(OpReceive) {
		return true
	}
	d, err := e.decode(sm)
	return err == nil && scope.inScope(OpReceive, d.value())
}

// MaxReason is the longest reason, in bytes, a replay (ReplayRequest) or
// a message (Message.Reason) gives; a replay.executed record keeps the
// replay's in its ref, whole.
const MaxReason = 512 // maxAuditText

// ReplayRequest asks for retained messages of a subject again.
type ReplayRequest struct {
	Subject      string `json:"subject"`
	Reason       string `json:"reason,omitempty"`
	FromSequence uint64 `json:"fromSequence,omitempty"`
	ToSequence   uint64 `json:"toSequence,omitempty"`
	Max          int    `json:"max,omitempty"`
}

// Replay returns retained messages of a subject in sequence order. The
// subject must allow replay, the contract must grant it, and a reason must
// be given where policy requires one; otherwise REPLAY_DENIED. A reason
// over MaxReason bytes or holding a control character (C0, tab and
// newline included, DEL, C1) is BAD_REQUEST, one that is not UTF-8
// INVALID_UTF8. Both outcomes are audited.
func (e *Engine) Replay(ctx context.Context, c Caller, r ReplayRequest) ([]*Message, error) {
	if !e.ops.enter() { // Shutdown waits for its record (inflight.go)
		return nil, errShutdown()
	}
	defer e.ops.leave()
	if err := e.auditGuard(ctx); err != nil {
		return nil, err
	}
	s := e.subject(r.Subject)
	if s == nil {
		return nil, NewError(CodeSubjectNotFound, "unknown subject %q", r.Subject)
	}
	deny := func(code Code, reason string) error {
		e.audit(ctx, EventReplayDenied.record(OutcomeDeny, code, store.AuditRecord{Subject: s.name, Principal: c.Principal.ID, ContractID: c.ContractID, PolicyID: s.policyID}))
		return NewError(code, "%s", reason)
	}
	switch {
	case len(r.Reason) > MaxReason:
		return nil, deny(CodeBadRequest, "the reason is longer than "+strconv.Itoa(MaxReason)+" bytes")
	case !utf8.ValidString(r.Reason):
		return nil, deny(CodeInvalidUTF8, "the reason is not valid UTF-8")
	case hasControl(r.Reason):
		// The reason is written whole into the replay.executed record and
		// every receipt of it, read back by terminals and consoles: a line
		// of text, without ESC, CSI, CR or any other control character,
		// and without a formatting character that reorders or breaks it
		// (U+202E, U+2028: hasControl).
		return nil, deny(CodeBadRequest, "the reason holds a control or formatting character")
	}
	ctr, code, reason := e.checkContract(ctx, c.ContractID, c.Principal, s, OpReplay)
	switch {
	case code == CodeOperationNotInContract || (code == CodeOK && !s.policy.Replay.Allowed):
		return nil, deny(CodeReplayDenied, "replay is not allowed on this subject for this principal")
	case code != CodeOK:
		return nil, deny(code, reason)
	case s.policy.Replay.RequireReason && r.Reason == "":
		return nil, deny(CodeReplayDenied, "replay requires a reason")
	}
	rp, why := ctr.rulePrincipal(&e.dir, c.Principal)
	if why != "" {
		return nil, deny(CodeGrantRevoked, why) // as checkContract refuses it
	}
	a := &Admission{Message: &Message{Subject: s.name, Reason: r.Reason, Source: c.Principal.ID}, Principal: rp, Region: c.Region, subj: s, Now: e.now()}
	if v := s.evalRules(OpReplay, a); !v.Allowed() {
		if v.Code == CodePolicyDenied {
			v.Code = CodeReplayDenied
		}
		return nil, deny(v.Code, v.Reason)
	}
	max := r.Max
	if max <= 0 || max > e.opts.MaxReplay {
		max = e.opts.MaxReplay
	}
	from := r.FromSequence
	if from == 0 {
		from = 1
	}
	var cut time.Time
	if s.replayAge > 0 {
		cut = a.Now.Add(-s.replayAge)
		from = e.firstSince(ctx, s.name, from, cut)
	}
	sms, err := e.readBudget(ctx, s.name, from, max, e.opts.MaxReadBytes)
	if err != nil {
		return nil, storeError(err)
	}
	out := make([]*Message, 0, len(sms))
	for _, sm := range sms {
		if r.ToSequence != 0 && sm.Seq > r.ToSequence {
			break
		}
		if !cut.IsZero() && sm.Time.Before(cut) {
			continue
		}
		m, err := decodeStored(sm)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if err := e.stillAllowed(ctx, c, s, OpReplay, EventReplayDenied); err != nil {
		return nil, err
	}
	// Nothing is handed over without its record.
	if err := e.recordReplay(ctx, store.AuditRecord{Subject: s.name, Principal: c.Principal.ID, ContractID: c.ContractID, PolicyID: s.policyID, Ref: noPANIn(r.Reason)}, out); err != nil {
		return nil, auditFailure(err)
	}
	return out, nil
}

// firstSince returns the sequence a replay from from reads on subject
// when only messages accepted at cut or later may be handed over: the
// first such message at or after from, found by halving the subject's
// retained range (messages are appended in the order they are accepted),
// so that a replay from the start of a long history returns the window's
// messages, not a page of older ones it must leave out. A read that fails
// leaves from where it got: the replay's own read and its per-message
// check decide.
func (e *Engine) firstSince(ctx context.Context, subject string, from uint64, cut time.Time) uint64 {
	first, last, err := e.store.Bounds(ctx, subject)
	if err != nil || last == 0 || from > last {
		return from
	}
	lo, hi := max(from, first), last+1 // the first in the window is in [lo, hi]
	for lo < hi {
		mid := lo + (hi-lo)/2
		ms, err := e.store.Read(ctx, subject, mid, 1)
		if err != nil || len(ms) == 0 {
			break
		}
		if ms[0].Time.Before(cut) {
			lo = ms[0].Seq + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// recordReplay writes the replay.executed record of the messages out
// handed over, on base: their sequences, count and digest as a delivery
// batch record carries them, so that the receipts of a message list the
// replays that returned it. More than maxLogged messages take more
// records; none takes one record naming none. It returns the first
// failure to write one.
func (e *Engine) recordReplay(ctx context.Context, base store.AuditRecord, out []*Message) error {
	if len(out) == 0 {
		return e.audit(ctx, EventReplayExecuted.record(OutcomeAllow, CodeOK, base))
	}
	var (
		log deliveryLog
		err error
	)
	log.addAll(out)
	log.record(EventReplayExecuted, OutcomeAllow, base, func(r store.AuditRecord) {
		if err == nil {
			err = e.audit(ctx, r)
		}
	})
	return err
}

// Recheck returns nil while c's contract still allows op on the subject,
// and otherwise the contract's refusal, audited without waiting for the
// audit write: receive.denied for OpReceive, replay.denied for OpReplay,
// reply.dropped for OpPublish (a requester's right to the reply of a
// request it published on the subject). A transport calls it just before
// it writes what an earlier call returned (a receive's or a replay's
// messages, a request's reply) when that write waited, in a write queue
// behind a slow reader for example: a revocation, an expiry, a grant
// revoked or a role taken away meanwhile holds for that write, and
// nothing goes out after the moment the contract stopped allowing it. The
// engine already recorded the call's messages as dispatched; the refusal
// follows them in the audit log. Safe for concurrent use; it does not
// block unless the contract must be read from a shared store.
func (e *Engine) Recheck(ctx context.Context, c Caller, subject string, op Operation) error {
	if e.ops.enter() { // Shutdown waits for its refusal's record; once it began, written by this caller, as Record's (inflight.go)
		defer e.ops.leave()
	}
	if c.Principal == nil {
		return NewError(CodeContractPrincipalMismatch, "%s", mismatchReason)
	}
	_, code, reason := e.checkContract(ctx, c.ContractID, c.Principal, e.subject(subject), op)
	if code == CodeOK {
		return nil
	}
	ev := EventReceiveDenied
	switch op {
	case OpReplay:
		ev = EventReplayDenied
	case OpPublish:
		ev = EventReplyDropped
	}
	e.auditAsync(ev.record(OutcomeDeny, code, store.AuditRecord{Gate: GateContract, Subject: subject, Principal: c.Principal.ID, ContractID: c.ContractID}))
	return NewError(code, "%s", reason)
}

// stillAllowed checks c's contract for op on s again, just before what a
// pull receive or a replay read is handed over: a revocation, an expiry or
// a lost role that came while the read waited (for the group, the store,
// the disk) holds for this read, not the next. A refusal is audited as ev.
func (e *Engine) stillAllowed(ctx context.Context, c Caller, s *subject, op Operation, ev Event) error {
	if _, code, reason := e.checkContract(ctx, c.ContractID, c.Principal, s, op); code != CodeOK {
		return e.contractError(ctx, ev, c.Principal, s.name, c.ContractID, code, reason)
	}
	return nil
}
