package pigeon

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"pigeon/store"
)

// AuditRecord is one entry of the hash-chained audit log. Records carry
// ids and codes, never payload values.
type AuditRecord = store.AuditRecord

// Event is the type of an audit record: what happened. Its values are
// stable; the audit log, exports and tools match on them.
type Event string

// Audit events.
const (
	EventSchemaRegistered     Event = "schema.registered"
	EventSubjectRegistered    Event = "subject.registered"
	EventContractNegotiated   Event = "contract.negotiated"
	EventContractDenied       Event = "contract.denied"
	EventContractRevoked      Event = "contract.revoked"
	EventContractRenewed      Event = "contract.renewed" // a contract's expiry moved later (RenewContract); principal, contractId; ref: how the principal authenticated
	EventPublishAccepted      Event = "publish.accepted"
	EventPublishDuplicate     Event = "publish.duplicate"
	EventPublishDenied        Event = "publish.denied"
	EventPublishFailed        Event = "publish.failed"
	EventQuarantineCreated    Event = "quarantine.created" // a refused message kept for review; ref: the quarantine record's id; outcome deny, with the store's code and no ref, when the store could not keep it
	EventQuarantineReleased   Event = "quarantine.released"
	EventReplyRouted          Event = "reply.routed"
	EventReplyDropped         Event = "reply.dropped"
	EventReplyDelivered       Event = "reply.delivered" // a reply handed to its requester; principal, contract: the requester's; ref: the request's id
	EventSubscriptionStarted  Event = "subscription.started"
	EventSubscriptionStopped  Event = "subscription.stopped"
	EventSubscribeDenied      Event = "subscribe.denied"
	EventReceiveDenied        Event = "receive.denied"
	EventDeliveryDispatched   Event = "delivery.dispatched"
	EventDeliveryAcked        Event = "delivery.acked"
	EventDeliveryNacked       Event = "delivery.nacked"
	EventDeliveryExhausted    Event = "delivery.exhausted"
	EventAckDenied            Event = "ack.denied"
	EventNackDenied           Event = "nack.denied"
	EventReplayExecuted       Event = "replay.executed"
	EventReplayDenied         Event = "replay.denied"
	EventAccountCreated       Event = "account.created"
	EventAccountDeleted       Event = "account.deleted"
	EventAccountRoleAdded     Event = "account.role.added"
	EventAccountRoleRemoved   Event = "account.role.removed"
	EventAccountKeysPublished Event = "account.keys.published"
	EventRoleDefined          Event = "role.defined"
	EventRoleDeleted          Event = "role.deleted"
	EventGrantIssued          Event = "grant.issued"
	EventGrantRevoked         Event = "grant.revoked"
	EventRetentionMessages    Event = "retention.messages"
	EventRetentionGroups      Event = "retention.groups"     // the stored progress of unused groups of a subject deleted; ref: how many
	EventRetentionAudit       Event = "retention.audit"      // audit records older than the longest retention.auditMs removed from the front of the log; ref: "N records through SEQ (hash HASH)", the checkpoint the chain now starts after
	EventRetentionQuarantine  Event = "retention.quarantine" // quarantine records older than Options.QuarantineRetention deleted; ref: how many
	EventSubjectPurged        Event = "subject.purged"       // an admin removed the retained messages of a subject not in the catalog; ref: how many, principal: the admin
	EventPurgeDenied          Event = "purge.denied"         // a purge refused (FORBIDDEN, CONFLICT, BAD_REQUEST); principal: the caller, subject: the one named, code: why; coalesced per principal and code
	EventAccessDenied         Event = "access.denied"        // a principal refused an operation for want of a role (a server's route: 403 FORBIDDEN; a WebSocket publish or request at a depth without RoleBridge), or an operation past a bound of a server's own (RATE_LIMITED: a WebSocket upgrade past a connection bound; an HTTP audit, quarantine or receipts page past the read pool, a receipts request past the log walks, a console stream past its principal's); principal: the caller, ref: the operation, and the bound for RATE_LIMITED ("DELETE /v1/grants/{jti}", "ws publish hops", "ws upgrade connection limit", "GET /v1/audit read budget"); coalesced per principal and code
	EventAuthFailed           Event = "auth.failed"          // a credential refused, or a source locked out after too many (RATE_LIMITED); ref: "auth:<method> from <source IP>" (and " (site <prefix> locked out)" when the source's IPv6 site locked it out), never the credential; coalesced per source and code
	EventStoreTruncated       Event = "store.truncated"
	EventAuditResumed         Event = "audit.resumed"
	// Events of programs (package programs).
	EventProgramDeployed   Event = "program.deployed"    // a first version bound
	EventProgramSwapped    Event = "program.swapped"     // a new version replaced the running one
	EventProgramRolledBack Event = "program.rolled_back" // an earlier version's module and manifest replaced the running one
	EventProgramRemoved    Event = "program.removed"
	EventProgramRefused    Event = "program.refused" // a deploy failed validation or binding; the old version runs on
	EventProgramBound      Event = "program.bound"   // a stored program bound again when the broker started
	EventProgramFailed     Event = "program.failed"  // a delivery failed in the program (trap, timeout, limit)
)

// record is the audit record of one ev with its outcome and code; r
// carries the rest. Every record the broker writes is built here, so here
// the fields that may hold what a client chose (a subject or a message id
// it named, a reference such as a quarantine record's id) are named
// "[REDACTED]" when they are a raw card number: the log is never
// rewritten, and must not keep one.
func (ev Event) record(outcome Outcome, code Code, r store.AuditRecord) store.AuditRecord {
	r.Type, r.Outcome, r.Code = string(ev), string(outcome), string(code)
	r.Subject, r.MessageID, r.Ref = noPAN(r.Subject), noPAN(r.MessageID), noPAN(r.Ref)
	return r
}

// Record appends an audit record of ev for a component built on the
// engine (package programs): outcome "allow" when code is CodeOK, "deny"
// otherwise, and r carries the rest (principal, subject, reference). It
// returns once the store has the record, with the store's error otherwise.
// Shutdown waits for a record begun before it; one begun after is
// written all the same, by the caller, and on a store Shutdown closed the
// error is SHUTTING_DOWN (inflight.go).
func (e *Engine) Record(ctx context.Context, ev Event, code Code, r AuditRecord) error {
	if e.ops.enter() {
		defer e.ops.leave()
	}
	outcome := OutcomeAllow
	if code != CodeOK {
		outcome = OutcomeDeny
	}
	return e.audit(ctx, ev.record(outcome, code, r))
}

// auditor chains and appends audit records. Callers only queue a record;
// the writer (the background goroutine, or a caller that must wait and
// finds nobody writing) takes the whole queue, chains it (sequence, id,
// hashes) in queue order and writes it in one store call, so concurrent
// callers share one durable write and hashing stays off their path.
type auditor struct {
	mu       sync.Mutex
	cond     *sync.Cond
	st       store.AuditLog
	pending  []store.AuditRecord
	queued   uint64 // records ever queued
	handled  uint64 // records ever written (or failed)
	writing  bool
	failed   uint64
	kick     chan struct{}
	batchBuf []store.AuditRecord
	// results parallels pending: where a waiting caller learns whether
	// its record was written (nil for records nobody waits for), or an
	// acceptance's place reserved in the queue (slotOpen, slotDropped;
	// see audit_durable.go).
	results   []*error
	resultBuf []*error
	taken     uint64 // records ever taken off pending's front: pending[0] was queued taken+1st
	holes     int    // reserved places in pending, open or dropped
	open      int    // those still open, which the writer writes nothing past
	released  bool   // no place is reserved any more (Shutdown)
	// broken is why the last write failed, nil while writes succeed; lost
	// counts the records dropped since it broke. While broken, operations
	// that must leave evidence are refused (see auditGuard).
	broken  atomic.Pointer[Error]
	lost    uint64
	probeMu sync.Mutex
	// Owned by the single active writer.
	seq  uint64 // last sequence written
	prev string // its hash
}

// restore reads the chain head from the store.
func (a *auditor) restore(ctx context.Context, st store.AuditLog) error {
	last, cp, err := st.AuditHead(ctx)
	if err != nil {
		return storeError(err)
	}
	a.st = st
	a.cond = sync.NewCond(&a.mu)
	a.kick = make(chan struct{}, 1)
	switch {
	case last.Seq != 0:
		a.seq, a.prev = last.Seq, last.Hash
	case cp.Seq != 0:
		a.seq, a.prev = cp.Seq, cp.Hash
	default:
		a.seq, a.prev = 0, store.Genesis
	}
	return nil
}

// audit appends one record and returns once the store has it, with the
// store's error when it could not be written. A failed write never breaks
// the chain (the failed records are dropped and the next ones chain to the
// last written); it marks the log broken, so that operations that must
// leave evidence are refused until a write succeeds again (auditGuard).
// Callers whose operation succeeds only with its evidence check the error;
// records of refusals may ignore it, the refusal stands either way.
func (e *Engine) audit(ctx context.Context, r store.AuditRecord) error { return e.appendAudit(r, true) }

// auditGuard refuses an operation while the audit log cannot be written
// (after a failed write): the broker fails closed rather than act without
// evidence. One caller at a time probes the log by writing the
// audit.resumed record, which names how many records were lost; when it
// is written, the log is whole again and the caller goes on. Its common
// path is one atomic load.
func (e *Engine) auditGuard(ctx context.Context) error {
	a := &e.auditor
	broken := a.broken.Load()
	if broken == nil {
		return nil
	}
	if !a.probeMu.TryLock() {
		return broken // another caller is probing
	}
	defer a.probeMu.Unlock()
	if a.broken.Load() == nil {
		return nil
	}
	a.mu.Lock()
	lost := a.lost
	a.mu.Unlock()
	if err := e.audit(ctx, EventAuditResumed.record(OutcomeAllow, CodeOK, store.AuditRecord{Ref: strconv.FormatUint(lost, 10) + " records could not be written"})); err != nil {
		return a.broken.Load()
	}
	return nil
}

// auditFailure is the error of an operation refused because the audit
// log cannot be written: the store's code (STORE_FULL on a full disk).
func auditFailure(err error) *Error {
	code := ErrorCode(storeError(err))
	if code == CodeInternal {
		code = CodeStoreUnavailable
	}
	return WrapError(code, err, "the audit log cannot be written; refused until it can")
}

// auditAsync queues a record and leaves chaining and writing to the
// background writer, which batches what accumulates while it writes; for
// the high-rate events: deliveries. (The acceptances of a store that
// cannot keep their record with the message are queued so too, in a
// place taken before the append: see audit_durable.go.) Under a durable
// store a crash can lose the last milliseconds of such records, never a
// message, and never a link of the chain (what is on disk is a prefix of
// it).
func (e *Engine) auditAsync(r store.AuditRecord) { e.appendAudit(r, false) }

// appendAudit queues r, waiting for its write when wait is set, its text
// fields bounded (boundAuditText). Observers hear of every record; a
// refusal that continues a run (coalescer) is counted rather than
// written, and a run it ends is written first.
func (e *Engine) appendAudit(r store.AuditRecord, wait bool) error {
	if !e.admitAudit(&r) {
		return nil
	}
	return e.queueAudit(r, wait)
}

// admitAudit readies r to be queued (its time, its texts bounded, the
// observers told) and reports whether it is to be written: a refusal
// within a run is counted instead (coalesce), and the summary of a run
// it ends is queued first.
func (e *Engine) admitAudit(r *store.AuditRecord) bool {
	if r.Time.IsZero() {
		r.Time = e.now()
	}
	boundAuditText(r)
	e.observeRecord(r)
	write, ended := e.coalesce.admit(r)
	if ended != nil {
		e.queueAudit(*ended, false)
	}
	return write
}

// flushCoalesced writes the summaries of the runs of refusals whose
// window closed before now, or of every run with a zero now.
func (e *Engine) flushCoalesced(now time.Time) {
	for _, s := range e.coalesce.flush(now) {
		e.queueAudit(s, false)
	}
}

// queueAudit queues r for the writer, waiting for its write when wait is
// set.
func (e *Engine) queueAudit(r store.AuditRecord, wait bool) error {
	if !wait {
		e.queueAsync(r) // written by the caller once the writer stopped (inflight.go)
		return nil
	}
	return e.enqueueAudit(r)()
}

// enqueueAudit queues r for the writer and returns the function that
// waits for its write and returns its error.
func (e *Engine) enqueueAudit(r store.AuditRecord) (wait func() error) {
	a := &e.auditor
	a.mu.Lock()
	a.pending = append(a.pending, r)
	a.queued++
	mine := a.queued
	res := new(error)
	a.results = append(a.results, res)
	a.mu.Unlock()
	return func() error {
		a.mu.Lock()
		defer a.mu.Unlock()
		for a.handled < mine {
			if !a.writing && a.ready() {
				e.writeAudit()
				continue
			}
			a.cond.Wait() // a writer at work, or an acceptance's place still open
		}
		return *res
	}
}

// noWait is the wait of a record not queued.
func noWait() error { return nil }

// auditInOrder queues r now, where the caller holds the lock that orders
// the change it records among others (the directory's: two changes of
// one account are recorded in the order they were made), and returns the
// function that waits for its write, for the caller to call once it has
// let the lock go: the lock is not held through a durable write, which
// every authentication would wait for.
func (e *Engine) auditInOrder(r store.AuditRecord) (wait func() error) {
	if !e.admitAudit(&r) {
		return noWait
	}
	wait = e.enqueueAudit(r)
	select { // written even if the wait came late
	case e.auditor.kick <- struct{}{}:
	default:
	}
	return wait
}

// auditRecovery records what the store dropped when it recovered from a
// crash (a torn tail of a log), one record each, so that the loss is in
// the evidence and not only in an operator's log.
func (e *Engine) auditRecovery(ctx context.Context) {
	rr, ok := e.store.(store.RecoveryReporter)
	if !ok {
		return
	}
	for _, t := range rr.Recovered() {
		e.opts.Logger.Warn("store dropped a torn tail on recovery", "log", t.Log, "file", t.File, "offset", t.Offset, "bytes", t.Bytes, "reason", t.Reason)
		e.audit(ctx, EventStoreTruncated.record(OutcomeAllow, CodeOK, store.AuditRecord{Subject: t.Log, Ref: t.File + " at offset " + strconv.FormatInt(t.Offset, 10) + ": " + strconv.FormatInt(t.Bytes, 10) + " bytes dropped (" + t.Reason + ")"}))
	}
}

// auditLinger is how long the background writer lets records accumulate
// before a write: one durable write (an fsync on a durable store) then
// covers the records of many publishes.
const auditLinger = 2 * time.Millisecond

// auditWriter writes queued records until Shutdown.
func (e *Engine) auditWriter() {
	a := &e.auditor
	t := time.NewTimer(0)
	<-t.C
	for {
		select {
		case <-a.kick:
		case <-e.done:
			e.stopWriting()
			return
		}
		t.Reset(auditLinger)
		select {
		case <-t.C:
		case <-e.done:
			e.stopWriting()
			return
		}
		a.mu.Lock()
		if !a.writing {
			e.writeAudit()
		}
		a.mu.Unlock()
	}
}

// writeAudit chains and writes batches until nothing is pending; a.mu is
// held, and released while a batch is chained and written.
func (e *Engine) writeAudit() {
	a := &e.auditor
	a.writing = true
	// A panic of the application's code while a.mu is held (its clock,
	// its logger) ends this call as a return would: a.mu held, the
	// writer no longer marked writing, its waiters woken, every batch
	// taken already settled. Unrecovered, it ended the process, or,
	// where a caller survived it, left every later record waiting for a
	// writer that was gone.
	locked := true
	defer func() {
		if !locked {
			return
		}
		if p := recover(); p != nil {
			a.writing = false
			// The batch written last was not handed back for reuse:
			// batchBuf may still be pending's array, which the next
			// batch would then be written from while records are
			// queued into it. Fresh buffers come with the next batch.
			a.batchBuf, a.resultBuf = nil, nil
			a.cond.Broadcast()
			e.logPanic("the audit writer", p)
		}
	}()
	for a.ready() {
		batch, results, n := a.take()
		locked = false
		a.mu.Unlock()
		var err error
		if len(batch) > 0 { // not only dropped places
			start := e.since()
			// A panic of the store's write is a failed write (the log
			// broken, its records counted lost, auditGuard failing
			// closed), not the end of the process nor a writer left
			// marked writing that every waiter waits on for ever.
			err = e.caught("the audit log's write", func() error { return a.write(batch) })
			e.committed(CommitAudit, len(batch), start)
		}
		a.mu.Lock()
		locked = true
		a.handled += uint64(n)
		if err != nil {
			a.failed += uint64(len(batch))
			a.lost += uint64(len(batch))
			fail := auditFailure(err)
			for _, r := range results {
				if r != nil {
					*r = fail
				}
			}
			if a.broken.Swap(fail) == nil {
				e.opts.Logger.Error("audit log cannot be written: refusing operations until it can", "records", len(batch), "err", err)
			}
		} else if len(batch) > 0 && a.broken.Load() != nil {
			resume := !slices.ContainsFunc(batch, func(r store.AuditRecord) bool { return r.Type == string(EventAuditResumed) })
			var at time.Time
			if resume {
				at = e.now() // before the log is whole: a clock that panics leaves it broken
			}
			lost := a.lost
			a.broken.Store(nil)
			if resume {
				// The evidence says how much is missing, whoever wrote first.
				a.pending = append(a.pending, EventAuditResumed.record(OutcomeAllow, CodeOK, store.AuditRecord{Time: at, Ref: strconv.FormatUint(lost, 10) + " records could not be written"}))
				a.results = append(a.results, nil)
				a.queued++
			}
			a.lost = 0
			e.opts.Logger.Warn("audit log is writable again", "lost", lost)
		}
		clear(batch)
		clear(results)
		a.batchBuf, a.resultBuf = batch[:0], results[:0]
		a.cond.Broadcast()
	}
	a.writing = false
}

// ready reports whether the front of the queue can be written: it holds
// a record and does not start with an acceptance's open place. a.mu is
// held.
func (a *auditor) ready() bool {
	return len(a.pending) > 0 && (a.open == 0 || a.results[0] != slotOpen)
}

// take removes the front of the queue that can be written and returns
// its records, their results, and n, how many entries it removed: the
// whole queue when no place is reserved in it (the common case, a swap
// of buffers); otherwise the entries before the first open place, less
// the dropped ones, the rest moved to the front. a.mu is held.
func (a *auditor) take() (batch []store.AuditRecord, results []*error, n int) {
	if a.holes == 0 {
		batch, results = a.pending, a.results
		a.pending, a.results = a.batchBuf[:0], a.resultBuf[:0]
		a.taken += uint64(len(batch))
		return batch, results, len(batch)
	}
	n = len(a.pending)
	if a.open > 0 {
		n = slices.Index(a.results, slotOpen)
	}
	batch, results = a.batchBuf[:0], a.resultBuf[:0]
	for i, res := range a.results[:n] {
		if res == slotDropped {
			a.holes--
			continue
		}
		batch, results = append(batch, a.pending[i]), append(results, res)
	}
	rest := copy(a.pending, a.pending[n:])
	copy(a.results, a.results[n:])
	clear(a.pending[rest:])
	clear(a.results[rest:])
	a.pending, a.results = a.pending[:rest], a.results[:rest]
	a.taken += uint64(n)
	return batch, results, n
}

// flushAudit writes what is still pending, waiting for a writer at work.
// Records queued behind an acceptance's open place stay queued until it
// is filled (see audit_durable.go); they are not chained yet.
func (e *Engine) flushAudit() {
	a := &e.auditor
	a.mu.Lock()
	for a.writing {
		a.cond.Wait()
	}
	e.writeAudit()
	a.mu.Unlock()
}

// Audit returns up to max audit records with sequence >= from, in order.
func (e *Engine) Audit(ctx context.Context, from uint64, max int) ([]AuditRecord, error) {
	e.flushCoalesced(e.now())
	e.flushAudit() // an auditor reads every record chained so far
	recs, err := e.store.ReadAudit(ctx, from, max)
	return recs, storeError(err)
}

// walkAudit walks the whole audit chain once; see VerifyAudit. A walk
// that a retention trim overtook (it cut the records the walk was to read
// next) finds the chain broken at the first record after the checkpoint
// the trim left: it walks again from that checkpoint, once, since that is
// retention, not tampering.
func (e *Engine) walkAudit(ctx context.Context) (uint64, error) {
	e.flushAudit()
	n, err := store.VerifyAudit(ctx, e.store)
	if ce, ok := err.(*store.ChainError); ok {
		if _, cp, herr := e.store.AuditHead(ctx); herr == nil && cp.Seq != 0 && ce.Seq <= cp.Seq+1 {
			n, err = store.VerifyAudit(ctx, e.store)
		}
	}
	if ce, ok := err.(*store.ChainError); ok {
		err = WrapError(CodeAuditTampered, err, "audit record %d: %s", ce.Seq, ce.Reason)
	} else {
		err = storeError(err)
	}
	res := &VerifyResult{Time: e.now(), OK: err == nil, Verified: n}
	if err != nil {
		res.Error = string(ErrorCode(err))
	}
	e.lastVerify.Store(res)
	return n, err
}
