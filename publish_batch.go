package pigeon

import (
	"context"

	"pigeon/store"
)

// Published is the answer to one message of PublishBatch: its Result, or
// the error that refused that message alone.
type Published struct {
	Result *Result
	Err    error
}

// PublishBatch publishes msgs in order, each exactly as Publish would:
// under the caller's contract, through every gate, audited. The messages
// the gates admit are appended together: on a store that appends a batch
// with one durable write (store.BatchAppender), one write and one fsync
// cover them and their sequences follow their order in msgs. A message
// that is refused, or that takes a path of its own (a reply to a waiting
// request, an id the publisher chose), is answered alone, after the ones
// admitted before it are appended. It returns one Published per message.
func (e *Engine) PublishBatch(ctx context.Context, c Caller, msgs []*Message) []Published {
	out := make([]Published, len(msgs))
	ba, ok := e.store.(store.BatchAppender)
	if _, chains := e.store.(store.AuditChainer); !ok || !chains || len(msgs) < 2 {
		for i, m := range msgs {
			out[i].Result, out[i].Err = e.Publish(ctx, c, m)
		}
		return out
	}
	var (
		held      []*Admission
		at        []int
		start     = e.since()
		byPublish []bool // the messages Publish answered (and observed) itself
	)
	if !start.IsZero() {
		byPublish = make([]bool, len(msgs))
		defer func() { e.tookBatch(msgs, byPublish, start) }() // after the last flush
	}
	viaPublish := func(i int) {
		if byPublish != nil {
			byPublish[i] = true
		}
		out[i].Result, out[i].Err = e.Publish(ctx, c, msgs[i])
	}
	release := func(a *Admission) { *a = Admission{}; admissionPool.Put(a) }
	flush := func() {
		if len(held) == 0 {
			return
		}
		sms := make([]store.Message, 0, len(held))
		accs := make([]store.AuditRecord, 0, len(held))
		bps := make([]*[]byte, 0, len(held))
		k := 0 // the held messages that fit their subjects' maxBytes
		for j, a := range held {
			sm, acc, bp := e.toStore(a)
			if err := e.tooLarge(ctx, a, len(sm.Body)); err != nil {
				*bp = sm.Body[:0]
				bodyPool.Put(bp)
				out[at[j]].Err = err
				release(a)
				continue
			}
			held[k], at[k] = a, at[j]
			sms, accs, bps = append(sms, sm), append(accs, acc), append(bps, bp)
			k++
		}
		if held, at = held[:k], at[:k]; k == 0 {
			return
		}
		start := e.since()
		res := ba.AppendAcceptedBatch(ctx, sms, accs)
		e.committed(CommitMessages, len(sms), start)
		for j, a := range held {
			*bps[j] = sms[j].Body[:0]
			bodyPool.Put(bps[j])
			r := res[j]
			out[at[j]].Result, out[at[j]].Err = e.accepted(ctx, a, accs[j], r.Stored, r.Dup, true, r.Err)
			if out[at[j]].Err == errIDTaken {
				out[at[j]].Err = e.idTaken(ctx, a)
			}
			release(a)
		}
		held, at = held[:0], at[:0]
	}
	defer flush()
	for i, in := range msgs {
		if in == nil || in.ID != "" {
			flush()
			viaPublish(i)
			continue
		}
		if err := e.admissible(ctx); err != nil {
			out[i].Err = err
			continue
		}
		a := admissionPool.Get().(*Admission)
		e.prepare(a, c, in)
		if s := a.subj; s != nil && s.mode == ModeRequestReply && a.Message.CorrelationID != "" {
			release(a)
			flush()
			viaPublish(i)
			continue
		}
		if gate, v, ok := e.judge(ctx, e.gates, a); !ok {
			out[i].Err = e.refuse(ctx, a, gate, v)
			release(a)
			continue
		}
		held, at = append(held, a), append(at, i)
	}
	return out
}

// admissible refuses any publish while the audit log cannot be written,
// the engine is shutting down or ctx is done.
func (e *Engine) admissible(ctx context.Context) error {
	if err := e.auditGuard(ctx); err != nil {
		return err
	}
	if e.closed.Load() {
		return errShutdown()
	}
	if err := ctx.Err(); err != nil {
		return WrapError(CodeRequestTimeout, err, "context done")
	}
	return nil
}
