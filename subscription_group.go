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
	for s.ctx.Err() == nil {
		s.settlePending()
		if !keepAt.IsZero() && !e.now().Before(keepAt) {
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
		if s.nAnswers.Load() >= maxBatch {
			s.flush()
		}
		free := cap(s.slots) - len(s.slots)
		var wait time.Duration = 50 * time.Millisecond
		if free > 0 && s.checkDelivery() {
			msgs, attempts, until, next, err := e.leaseFor(s, free)
			if !until.IsZero() && e.extends(s.g) {
				// Due with a third of the ack wait left, counted from
				// when the leases were taken: a batch whose store calls
				// took long has spent part of it already, and counted
				// from now the leases could run out for the other nodes
				// before their first extension.
				if due := until.Add(-s.subj.ackWait / 3); keepAt.IsZero() || due.Before(keepAt) {
					keepAt = due
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
						_ = e.settle(ctx, s, d.seq, ErrUndelivered)
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
	var acked []*decoded
	for _, r := range rs {
		if r.err == nil {
			acked = append(acked, r.d)
			continue
		}
		rec := EventDeliveryNacked.record(OutcomeDeny, CodeOK, s.base())
		rec.MessageID, rec.Seqs = r.d.m.ID, seqText(r.d.seq)
		e.auditAsync(rec)
		_ = e.settle(ctx, s, r.d.seq, r.err)
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
		err := e.markMineDone(ctx, s, acked)
		if err == nil { // else not done: the leases expire and the messages come back
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

// markMineDone marks done, in s's group, the messages of acked whose
// leases s holds. The group's lock is given back however markDoneAll
// ends: a store that panics under it must not leave the group locked for
// the subscription's finish, which takes it to give the leases back.
func (e *Engine) markMineDone(ctx context.Context, s *subscription, acked []*decoded) error {
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
	return e.markDoneAll(ctx, g, mine)
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
	e.releaseShared(ctx, g, false, now, back...)
}
