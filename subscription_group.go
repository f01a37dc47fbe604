package pigeon

import (
	"context"
	"time"
)

// runGroup competes for leased messages of a work-queue group.
func (s *subscription) runGroup() {
	e := s.e
	// keepAt: when the cluster leases of running handlers are next due
	// to be extended (keepShared); zero: none runs.
	var keepAt time.Time
	// keep extends them when they are due.
	keep := func() {
		if keepAt.IsZero() || e.now().Before(keepAt) {
			return
		}
		if e.dir.isBehind() || e.contractInDoubt(s.caller.ContractID) {
			// Not extended while this node cannot tell whether the
			// holder may still hold them: a revoked consumer must not
			// keep messages from the group's others. A lease that
			// lapses meanwhile is given to another consumer.
			keepAt = e.now().Add(behindPause)
		} else {
			keepAt = e.keepShared(s)
		}
	}
	for s.ctx.Err() == nil {
		s.settlePending()
		keep()
		if s.nAnswers.Load() >= maxBatch {
			s.flush()
		}
		free := cap(s.slots) - len(s.slots)
		var wait time.Duration = 50 * time.Millisecond
		if free > 0 && s.checkDelivery() {
			msgs, attempts, until, next, err := e.leaseFor(s, free)
			early := false // the batch's leases were extended before their handover
			if !until.IsZero() && e.extends(s.g) {
				// Due with a third of the ack wait left, counted from
				// when the leases were taken: a batch whose store calls
				// took long has spent part of it already, and counted
				// from now the leases could run out for the other nodes
				// before their first extension.
				if due := until.Add(-s.subj.ackWait / 3); keepAt.IsZero() || due.Before(keepAt) {
					keepAt = due
				}
				// A batch slower than two thirds of an ack wait (its
				// leases all date from its start) is due already: its
				// leases are extended before they are handed over, and
				// one the cluster reports lost (another node took it
				// after it ran out) is not handed over at all.
				if early = !e.now().Before(keepAt); early {
					keep()
				}
			}
			if err != nil && !transient(err) {
				if s.ctx.Err() == nil {
					s.stop(err)
				}
				return
			}
			// After a transient failure msgs is empty: the loop waits and
			// leases again.
			sent := &s.sent
			for i, d := range msgs {
				if early && e.letGoIfLost(s, d.seq) {
					continue
				}
				ok := s.acquire()
				if ok && !s.checkDelivery() {
					s.release()
					ok = false
				}
				if !ok {
					// Leased but never handed over: back to the group at
					// once, uncounted.
					ctx := context.WithoutCancel(s.ctx)
					for _, d := range msgs[i:] {
						_ = e.settle(ctx, s, d, ErrUndelivered)
					}
					break
				}
				sent.add(d.seq, d.m.ID)
				s.running.Add(1)
				s.deliver(d, attempts[i])
			}
			s.flushHandler()
			sent.record(EventDeliveryDispatched, OutcomeAllow, s.base(), e.auditAsync)
			if len(msgs) == free {
				continue
			}
			if next > 0 && next < wait {
				wait = next
			}
		}
		if len(s.slots) == 0 {
			s.flush() // idle: record what was acknowledged
		} else {
			wait = min(wait, ackRecordDelay)
		}
		if !keepAt.IsZero() {
			wait = max(min(wait, keepAt.Sub(e.now())), time.Millisecond)
		}
		select {
		case <-s.wake:
		case <-s.resWake:
		case <-s.ctx.Done():
		case <-time.After(wait):
		}
	}
}

// settleAll settles the subscription's work-queue outcomes: what was
// acknowledged is marked done in one store write and one record, each
// failure is given back for redelivery.
func (e *Engine) settleAll(s *subscription, rs []outcome) {
	ctx := context.WithoutCancel(s.ctx)
	rs = e.refuseLost(s, rs)
	var acked []*decoded
	for _, r := range rs {
		if r.err == nil {
			acked = append(acked, r.d)
			continue
		}
		rec := EventDeliveryNacked.record(OutcomeDeny, CodeOK, s.base())
		rec.MessageID, rec.Seqs = r.d.m.ID, seqText(r.d.seq)
		e.auditAsync(rec)
		_ = e.settle(ctx, s, r.d, r.err)
	}
	if len(acked) > 0 && !s.mayAnswer(ctx) {
		// The contract stopped allowing the consumer while its handler
		// held these: its acknowledgement is not trusted, as a pull Ack
		// after a revocation is refused. They go back to the group at
		// once, the attempt spent; no acked record names the consumer.
		e.handBack(ctx, s, acked)
		acked = nil
	}
	if len(acked) > 0 {
		// On a failed write acked keeps those that stand settled all the
		// same (unrecorded); the others come back for redelivery.
		acked, _ = e.markMineDone(ctx, s, acked)
		if len(acked) > 0 {
			s.resMu.Lock()
			for _, d := range acked {
				s.acked.add(d.seq, d.m.ID)
			}
			s.resMu.Unlock()
			s.nAnswers.Add(int32(len(acked)))
		}
	}
	e.pokeGroup(s.subj.name)
}

// letGoIfLost lets go of s's lease of seq, taken and not handed over,
// when the cluster reported it lost as it was extended before the
// handover: the message is not handed over (another node may run it),
// and the node asks the cluster again. It reports whether it did.
func (e *Engine) letGoIfLost(s *subscription, seq uint64) bool {
	g := s.g
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.leases[seq]
	if l == nil || l.holder != s.holder() || !l.lost {
		return false
	}
	l.free(e.now())
	return true
}

// refuseLost takes out of rs the answers to deliveries whose cluster
// lease was lost while their handlers ran (lease.lost, keepShared) and
// returns the others. Such an answer settles nothing, an ack as a
// failure: another node may hold the message's lease, and an ack here
// would mark it done under that node's run. Its lease is let go at once
// (settle), and the answer is audited as refused, ack.denied or
// nack.denied with ACK_NOT_ALLOWED, as a pull consumer's answer after its
// lease ran out is.
func (e *Engine) refuseLost(s *subscription, rs []outcome) []outcome {
	if !e.extends(s.g) {
		return rs
	}
	g, holder := s.g, s.holder()
	kept := rs[:0]
	var refused []outcome
	g.mu.Lock()
	now := e.now()
	for _, r := range rs {
		if l := g.leases[r.d.seq]; l != nil && l.holder == holder && l.lost {
			l.free(now)
			refused = append(refused, r)
			continue
		}
		kept = append(kept, r)
	}
	g.mu.Unlock()
	for _, r := range refused {
		e.refusedAnswer(s, r.d, r.err)
	}
	return kept
}

// refusedAnswer audits s's answer to d (an ack when err is nil) as
// refused, ack.denied or nack.denied with ACK_NOT_ALLOWED: the
// delivery's cluster lease is no longer this node's, and the answer
// settled nothing.
func (e *Engine) refusedAnswer(s *subscription, d *decoded, err error) {
	ev := EventAckDenied
	if err != nil {
		ev = EventNackDenied
	}
	rec := ev.record(OutcomeDeny, CodeAckNotAllowed, s.base())
	rec.MessageID, rec.Seqs = d.m.ID, seqText(d.seq)
	e.auditAsync(rec)
}

// markMineDone marks done, in s's group, the messages of acked whose
// leases s holds, and returns acked without those the cluster refused
// (markDoneAll: their leases ran out here and another node took them
// over), whose acks are audited as refused, as refuseLost's are. When
// the store fails to record them, the failure is logged and returned
// with those of acked that stand settled all the same; the leases of the
// others are let go at once and their messages come back for another
// delivery, their attempts counted (unrecorded): the handler ran, but
// its answer was not recorded, as after a crash between the two. Before,
// their leases stayed held, busy, for as long as the subscription lived
// (in a cluster, extended): the messages were neither settled nor
// delivered again. The group's lock is given back however markDoneAll
// ends: a store that panics under it must not leave the group locked for
// the subscription's finish, which takes it to give the leases back.
func (e *Engine) markMineDone(ctx context.Context, s *subscription, acked []*decoded) ([]*decoded, error) {
	refused, settled, back, err := e.markMineLocked(ctx, s, acked)
	if len(refused) > 0 {
		acked = s.refuse(acked, refused)
	}
	if err == nil {
		return acked, nil
	}
	e.opts.Logger.Warn("pigeon: recording acknowledged messages done failed; their messages are delivered again",
		"subject", s.subj.name, "subscription", s.id, "redelivered", len(back), "settled", len(settled), "err", err)
	keep := make(map[uint64]bool, len(settled))
	for _, seq := range settled {
		keep[seq] = true
	}
	var kept []*decoded
	for _, d := range acked {
		if keep[d.seq] {
			kept = append(kept, d)
		}
	}
	return kept, err // settleAll wakes the group's consumers
}

// markMineLocked is markMineDone's work under the group's lock: it
// returns the sequences the cluster refused and, when the store failed
// to record the others, those that stand settled and those that come
// back (unrecorded).
func (e *Engine) markMineLocked(ctx context.Context, s *subscription, acked []*decoded) (refused, settled, back []uint64, err error) {
	g := s.g
	g.mu.Lock()
	defer g.mu.Unlock()
	var mine []uint64
	holder := s.holder()
	for _, d := range acked {
		if l := g.leases[d.seq]; l != nil && l.holder == holder {
			mine = append(mine, d.seq)
		}
	}
	refused, err = e.markDoneAll(ctx, g, mine)
	if err != nil {
		settled, back = e.unrecorded(ctx, g, holder, mine, false, e.now())
	}
	return refused, settled, back, err
}

// refuse audits the acks of acked whose sequences are in refused as
// refused (refusedAnswer) and returns the others.
func (s *subscription) refuse(acked []*decoded, refused []uint64) []*decoded {
	no := make(map[uint64]bool, len(refused))
	for _, seq := range refused {
		no[seq] = true
	}
	var kept []*decoded
	for _, d := range acked {
		if no[d.seq] {
			s.e.refusedAnswer(s, d, nil)
			continue
		}
		kept = append(kept, d)
	}
	return kept
}

// mayAnswer reports whether the subscription's contract still allows it
// to receive on its subject, so that its answers may settle messages.
func (s *subscription) mayAnswer(ctx context.Context) bool {
	_, code, _ := s.e.checkContract(ctx, s.caller.ContractID, s.caller.Principal, s.e.subject(s.subj.name), OpReceive)
	return code == CodeOK
}

// handBack gives the leases of ds that s holds back to the group, due at
// once; the attempts they took stay counted (the consumer was handed
// them).
func (e *Engine) handBack(ctx context.Context, s *subscription, ds []*decoded) {
	seqs := make([]uint64, len(ds))
	for i, d := range ds {
		seqs[i] = d.seq
	}
	g := s.g
	g.mu.Lock()
	now := e.now()
	back := e.unleaseLocked(ctx, g, s.holder(), seqs, false, now)
	g.mu.Unlock()
	e.letGoShared(ctx, g, now, back...)
}
