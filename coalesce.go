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
	// coalescedLast precedes, in the Ref of an access.denied run's
	// record, the route its latest refusal named.
	coalescedLast = "last:"
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
}

// summary is the record standing for the counted refusals of r: the
// latest one's fields, no message id, and Ref naming how many, then, for
// auth.failed, whose run is its Ref's, the method and source ("coalesced:N
// auth:token from 192.0.2.7"), and for access.denied, whose run spans the
// routes a principal tries, the latest refusal's route after "last:"
// ("coalesced:N last:POST /v1/grants"), so that a route probed inside a
// run is not known only as a count.
func (r *run) summary() store.AuditRecord {
	s := r.last
	s.MessageID = ""
	ref := coalescedRef + strconv.FormatUint(r.n, 10)
	switch s.Type {
	case string(EventAuthFailed):
		ref += " " + s.Ref
	case string(EventAccessDenied):
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
		w.n++
		w.last = *r
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
