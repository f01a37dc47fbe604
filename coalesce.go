package pigeon

import (
	"strconv"
	"sync"
	"time"

	"pigeon/store"
)

// A run of refusals that judge who asks rather than what is sent (for
// rate, RATE_LIMITED; at the contract gate: no contract, an expired or
// revoked one, a subject or operation it does not grant; an ack of a
// message leased to someone else, ACK_NOT_ALLOWED; a principal at its
// most contracts, subscriptions or groups, TOO_MANY_*; a purge refused,
// purge.denied; an operation refused for want of a role, access.denied;
// a credential refused, auth.failed, one run per method and source),
// or that refuse a message before anything else is judged
// (at the envelope gate, which comes before the contract and rate gates),
// is written to the audit log as its first refusal and one record for the
// rest. Such a refusal is
// cheap, and comes as fast as a client retries (a client over its limit,
// or looping on a contract that expired, or sending malformed envelopes),
// but it would still add one record each: the log, and the disk under it,
// would then grow with the refused traffic rather than with what the
// limits allow, until a full disk stopped the broker for everyone.
// Coalescing keeps the evidence (who was refused on which subject, why,
// how often, from when to when) at one or two records per second for each
// principal, subject, gate and code; refusals naming no subject the broker
// knows (unknown ones, and every envelope refusal, whose subject is the
// sender's to choose) are one run whatever subject they name, so naming a
// new one each time starts no new run; so are purge refusals other than
// CONFLICT (whose subject is one of the catalog's), since a purge names
// any subject, the catalog's or not. Refusals of a message's content
// past the envelope are written one by one.
const (
	// coalesceWindow is how long after the first refusal of a run like
	// refusals are counted rather than written.
	coalesceWindow = time.Second
	// maxCoalescing bounds the runs counted at once; beyond it every
	// refusal is written, so evidence is never traded for memory.
	maxCoalescing = 10000
	// coalescedRef is the Ref prefix of the record standing for a run's
	// counted refusals; the count follows it.
	coalescedRef = "coalesced:"
	// coalescedLast precedes, in the Ref of a run's record (but
	// auth.failed's, whose run is one Ref), the Ref of its latest refusal:
	// the route, or the bound, or the place, it was refused at.
	coalescedLast = "last:"
	// coalescedMixed follows the count, before coalescedLast, when the
	// refusals the record stands for did not all carry one Ref, so that
	// the latest is not read as where every one of them was refused.
	coalescedMixed = "(refs differ)"
)

// coalesceKey names a run: refusals of one event, principal, subject,
// gate and code.
type coalesceKey struct{ event, principal, subject, gate, code string }

// coalesced reports whether r is a refusal counted in runs.
func coalesced(r *store.AuditRecord) bool {
	if r.Outcome != string(OutcomeDeny) {
		return false
	}
	switch {
	case r.Code == string(CodeRateLimited), r.Code == string(CodeAckNotAllowed),
		r.Code == string(CodeTooManyContracts), r.Code == string(CodeTooManySubscriptions), r.Code == string(CodeTooManyGroups):
	case r.Gate == GateContract, r.Gate == GateEnvelope, r.Type == string(EventPurgeDenied), r.Type == string(EventAccessDenied),
		r.Type == string(EventAuthFailed):
	default:
		return false
	}
	return true
}

// keyOf names the run of r.
func keyOf(r *store.AuditRecord) coalesceKey {
	subject := r.Subject
	if r.Gate == GateEnvelope || r.Code == string(CodeSubjectNotFound) ||
		r.Type == string(EventPurgeDenied) && r.Code != string(CodeConflict) {
		subject = ""
	}
	who := r.Principal
	if r.Type == string(EventAuthFailed) {
		who = r.Ref // nobody was authenticated: the method and source ask
	}
	return coalesceKey{r.Type, who, subject, r.Gate, r.Code}
}

// inWindow reports whether t lies in the window of a run that started at
// start. A t before start (the wall clock stepped back, or a record came
// timed ahead of the clock) is not: read as "within", it kept a run
// counting, neither written nor flushed, for as long as the step, and an
// Options.Now without a monotonic reading (or Engine.Record given a time)
// meets it.
func inWindow(start, t time.Time) bool {
	d := t.Sub(start)
	return d >= 0 && d < coalesceWindow
}

// run is the refusals counted since the first of a window was written.
type run struct {
	start time.Time         // when the written first refusal was made
	last  store.AuditRecord // the latest counted refusal
	n     uint64            // refusals counted, not written
	mixed bool              // the counted refusals carried more than one Ref
}

// count adds rec, a refusal of the run within its window, to the count.
func (r *run) count(rec *store.AuditRecord) {
	if r.n > 0 && rec.Ref != r.last.Ref {
		r.mixed = true
	}
	r.n++
	r.last = *rec
}

// summary is the record standing for the counted refusals of r: the
// latest one's fields, no message id, and Ref naming how many, then, for
// auth.failed, whose run is its Ref's, the method and source ("coalesced:N
// auth:token from 192.0.2.7"); for every other event, whose run spans
// the Refs its refusals carry (the routes a principal tries, the bounds a
// client's frames meet: "ws publish connection rate", "ws request
// bytes", "POST /v1/requests request bytes"), the latest refusal's Ref
// after "last:" ("coalesced:N last:POST /v1/grants"), preceded by "(refs
// differ)" when the counted refusals did not all carry it ("coalesced:N
// (refs differ) last:ws request bytes"), so that where the refusals of a
// run were made is not known only as a count. The mark comes before the
// Ref, which runs to the end: a Ref ending like the mark cannot pass for
// it, and a Ref cut to the bound does not cut it. The Ref was held to
// auditText before (a control or formatting character quoted), so it is
// kept as it was written, quoted; the whole is held to the bound again.
func (r *run) summary() store.AuditRecord {
	s := r.last
	s.MessageID = ""
	ref := coalescedRef + strconv.FormatUint(r.n, 10)
	if s.Type == string(EventAuthFailed) {
		ref += " " + s.Ref
	} else {
		if r.mixed {
			ref += " " + coalescedMixed
		}
		if s.Ref != "" {
			ref += " " + coalescedLast + s.Ref
		}
	}
	s.Ref = auditText(ref) // within the bound its parts were held to
	return s
}

// coalescer counts runs of refusals. It is safe for concurrent use.
type coalescer struct {
	mu   sync.Mutex
	runs map[coalesceKey]*run
	// closed: Shutdown began, and every refusal is written (close).
	closed bool
}

// admit decides for r, about to be audited: write says whether r is
// written (false: it is counted in its run), and ended, when not nil, is
// the summary of the run r ends, to be written before r. Only refusals
// that coalesced accepts are counted.
func (c *coalescer) admit(r *store.AuditRecord) (write bool, ended *store.AuditRecord) {
	if !coalesced(r) {
		return true, nil
	}
	k := keyOf(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return true, nil
	}
	w := c.runs[k]
	switch {
	case w == nil:
		if len(c.runs) >= maxCoalescing {
			return true, nil
		}
		if c.runs == nil {
			c.runs = make(map[coalesceKey]*run)
		}
		c.runs[k] = &run{start: r.Time}
		return true, nil
	case inWindow(w.start, r.Time):
		w.count(r)
		return false, nil
	}
	if w.n > 0 {
		s := w.summary()
		ended = &s
	}
	*w = run{start: r.Time}
	return true, ended
}

// flush ends the runs whose window closed before now (every run, with a
// zero now) and returns the summaries of those that counted refusals.
func (c *coalescer) flush(now time.Time) []store.AuditRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []store.AuditRecord
	for k, w := range c.runs {
		if !now.IsZero() && inWindow(w.start, now) {
			continue
		}
		if w.n > 0 {
			out = append(out, w.summary())
		}
		delete(c.runs, k)
	}
	return out
}

// close ends every run and returns the summaries of those that counted
// refusals; from then on admit counts none and every refusal is written.
// Shutdown calls it as it stops the janitor, whose flushes write a run
// once its window closed: a refusal counted after that would be written
// by no flush.
func (c *coalescer) close() []store.AuditRecord {
	c.mu.Lock()
	c.closed = true // first: no refusal is counted after the flush
	c.mu.Unlock()
	return c.flush(time.Time{})
}
