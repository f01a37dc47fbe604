package pigeon

import (
	"context"
	"errors"
	"slices"
	"sync"

	"pigeon/store"
	"pigeon/store/memory"
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
// cover them, and on the memory store one lock covers each run of up to
// memoryBatch; their sequences follow their order in msgs, and the
// encoding of each one that transports send (its Result's, its
// deliveries') is made from its stored envelope rather than encoded
// again. A message that is refused, or that takes a path of its own (a
// reply to a waiting request, an id the publisher chose), is answered
// alone, after the ones admitted before it are appended, so the audit
// log records the batch as it would the same messages published one
// after another (on the memory store; a durable store's batch records a
// duplicate after the batch's acceptances). A message held for the
// append is checked again just before it: access taken away since the
// gates judged it (its contract revoked, a role or grant it relied on
// removed) refuses it as the contract gate now would. It returns one
// Published per message.
func (e *Engine) PublishBatch(ctx context.Context, c Caller, msgs []*Message) []Published {
	out := make([]Published, len(msgs))
	if !e.ops.enter() { // Shutdown waits for the held messages' answers (inflight.go)
		for i := range out {
			out[i].Err = errShutdown()
		}
		return out
	}
	defer e.ops.leave()
	appendBatch, most := e.batchAppender()
	if appendBatch == nil || len(msgs) < 2 {
		for i, m := range msgs {
			out[i].Result, out[i].Err = e.Publish(ctx, c, m)
		}
		return out
	}
	sc := batchPool.Get().(*batchScratch)
	defer sc.release()
	var (
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
	release := (*Admission).free
	flush := func() {
		// Access taken away since the gates judged a held message (its
		// contract revoked, a role or grant it relied on removed) takes
		// the message too: its append would be a use after the change,
		// its acceptance recorded after the change's record. It is
		// refused after the messages held before it are appended, as the
		// gates' refusals are.
		allowed := 0 // sc.held[:allowed] are checked again and still allowed
		for len(sc.held) > 0 {
			for allowed < len(sc.held) {
				h := &sc.held[allowed]
				code, reason := e.stillHeld(ctx, c, h)
				if code == CodeOK {
					allowed++
					continue
				}
				if allowed > 0 {
					break
				}
				out[h.at].Err = e.refuse(ctx, h.a, GateContract, Deny(code, reason))
				putBody(h.bp, sc.sms[0].Body)
				release(h.a)
				sc.remove(0)
			}
			if allowed == 0 {
				continue // every one left was refused
			}
			start := e.since()
			res := appendBatch(ctx, sc.res, sc.sms[:allowed], sc.accs[:allowed])
			e.committed(CommitMessages, len(res), start)
			after := e.afterAppend.Load()
			for j, r := range res {
				h, sm := &sc.held[j], &sc.sms[j]
				if after != nil && r.Err == nil && !r.Dup {
					(*after)(r.Stored)
				}
				o := &out[h.at]
				o.Result, o.Err = e.accepted(ctx, h.a, sc.accs[j], sm.Body, r.Stored, r.Dup, true, r.Err)
				if o.Err == errIDTaken {
					o.Err = e.idTaken(ctx, h.a)
				}
				putBody(h.bp, sm.Body)
				release(h.a)
			}
			// The store took res's messages: the rest (after a duplicate
			// it answered first) go on in a batch of their own.
			sc.drop(len(res))
			allowed -= len(res)
			clear(res)
			sc.res = res[:0]
		}
	}
	// No deferred flush: after a panic (a gate's is recovered, but a
	// fault of the answer is not) the messages held are dropped, never
	// appended on the way out, and a run the store took is never handed
	// to it again.
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
		ver := e.dir.version() // before the gates: a change while they judge is looked at again
		if gate, v, ok := e.judge(ctx, e.gates, a); !ok {
			flush() // its refusal is recorded after the acceptances before it
			out[i].Err = e.refuse(ctx, a, gate, v)
			release(a)
			continue
		}
		sm, acc, bp := e.toStore(a)
		if !a.subj.fits(len(sm.Body)) {
			flush() // as above
			out[i].Err = e.tooLarge(ctx, a, len(sm.Body))
			putBody(bp, sm.Body)
			release(a)
			continue
		}
		sc.held = append(sc.held, heldMessage{a: a, at: i, bp: bp, ver: ver})
		sc.sms, sc.accs = append(sc.sms, sm), append(sc.accs, acc)
		if len(sc.held) == most {
			flush()
		}
	}
	flush()
	return out
}

// heldMessage is a message of PublishBatch that the gates admitted,
// waiting to be appended with the others.
type heldMessage struct {
	a   *Admission
	at  int     // its index in the batch
	bp  *[]byte // its stored body's buffer, back to bodyPool once answered
	ver uint64  // the access directory's version before the gates judged it
}

// stillHeld checks again, before its append, the contract a held message
// of c was judged under: CONTRACT_REVOKED once the contract is revoked,
// and, when the access directory changed since the gates judged it,
// whatever the contract gate would answer now (a role or grant it relied
// on removed); CodeOK otherwise. The contract's expiry is judged at the
// message's admission, as the gates judged it: the store keeps that time.
func (e *Engine) stillHeld(ctx context.Context, c Caller, h *heldMessage) (Code, string) {
	con := h.a.contract
	if con == nil {
		return CodeOK, "" // no contract gate judged it (none in the chain)
	}
	if con.revoked.Load() {
		return CodeContractRevoked, "the contract was revoked"
	}
	if e.dir.version() == h.ver {
		return CodeOK, ""
	}
	_, code, reason := e.checkContractAt(ctx, h.a.contractID, c.Principal, h.a.subj, OpPublish, h.a.Now)
	return code, reason
}

// batchScratch holds the messages PublishBatch has admitted and not yet
// appended: held[i] is the one stored as sms[i], accepted as accs[i].
// PublishBatch calls reuse them (batchPool), so that a batch costs no
// allocation per message for them.
type batchScratch struct {
	held []heldMessage
	sms  []store.Message
	accs []store.AuditRecord
	res  []store.Appended // the store's answers, for a store that appends to it
}

// memoryBatch is how many admitted messages PublishBatch holds at most
// before it appends them to the memory store: few, so that the first
// ones are delivered (and a reader of the store finds them cached) while
// the rest are judged, where a durable store's batch shares one write.
const memoryBatch = 16

var batchPool = sync.Pool{New: func() any { return new(batchScratch) }}

// drop removes the first n messages.
func (sc *batchScratch) drop(n int) {
	k := copy(sc.held, sc.held[n:])
	copy(sc.sms, sc.sms[n:])
	copy(sc.accs, sc.accs[n:])
	clear(sc.held[k:])
	clear(sc.sms[k:])
	clear(sc.accs[k:])
	sc.held, sc.sms, sc.accs = sc.held[:k], sc.sms[:k], sc.accs[:k]
}

// remove removes the message at j.
func (sc *batchScratch) remove(j int) {
	sc.held = slices.Delete(sc.held, j, j+1)
	sc.sms = slices.Delete(sc.sms, j, j+1)
	sc.accs = slices.Delete(sc.accs, j, j+1)
}

// release returns sc, emptied, to batchPool; one grown past
// maxBatchScratch messages is left to the collector.
func (sc *batchScratch) release() {
	if cap(sc.held) > maxBatchScratch {
		return
	}
	sc.drop(len(sc.held))
	clear(sc.res[:cap(sc.res)]) // a panic may have left the store's answers there
	sc.res = sc.res[:0]
	batchPool.Put(sc)
}

// maxBatchScratch is the most messages a batchScratch pooled keeps room
// for.
const maxBatchScratch = 1024

// errBatchOutcomes is the error of each message of a batch the store
// answered with other than one outcome per message.
var errBatchOutcomes = errors.New("the store answered a batch append with outcomes for fewer or more messages than it was given")

// batchAppender returns how the engine's store appends a batch of
// admitted messages with their acceptance records (as appendAccepted
// appends one), and the most messages a batch holds (0: no bound), or nil
// when it appends them one by one: in one durable write on a store that
// keeps the records itself (store.BatchAppender with
// store.AuditChainer); under one lock, the records queued for the auditor
// in their places, on the memory store itself (not a type that embeds it
// to change its Append, which would be passed by). The store may take
// fewer messages than it is given, a prefix of them: the caller answers
// those and hands it the rest again. dst is a buffer the memory store
// appends its answers to.
func (e *Engine) batchAppender() (appendBatch func(ctx context.Context, dst []store.Appended, ms []store.Message, accepted []store.AuditRecord) []store.Appended, most int) {
	if ba, ok := e.store.(store.BatchAppender); ok {
		if _, ok := e.store.(store.AuditChainer); ok {
			return func(ctx context.Context, _ []store.Appended, ms []store.Message, accs []store.AuditRecord) []store.Appended {
				res := ba.AppendAcceptedBatch(ctx, ms, accs)
				if len(res) != len(ms) {
					// Not one outcome per message, as BatchAppender
					// promises: none is known to be stored.
					res = make([]store.Appended, len(ms))
					for i := range res {
						res[i].Err = errBatchOutcomes
					}
				}
				return res
			}, 0
		}
	}
	if ms, ok := e.store.(*memory.Store); ok {
		return func(ctx context.Context, dst []store.Appended, sms []store.Message, accs []store.AuditRecord) []store.Appended {
			return ms.AppendAcceptedBatchTo(ctx, dst, sms, accs, &e.auditor)
		}, memoryBatch
	}
	return nil, 0
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
