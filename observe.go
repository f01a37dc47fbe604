package pigeon

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"pigeon/internal/grant"
	"pigeon/store"
)

// Observer watches the engine at work, for metrics and live consoles. The
// engine calls it synchronously on the paths it observes (the publish path
// among them), so an implementation must be safe for concurrent use, must
// not block and should cost no more than a few atomic updates. With
// Options.Observer nil nothing is measured and nothing is called. A panic
// of one of its calls is recovered and logged with its stack (card
// numbers redacted), and noted (NotePanic, PanicObserver); it changes no
// outcome: the engine goes on as if the call had returned (under
// Observers, the observers after the one that panicked miss that call,
// except a Noted, which each is handed under its own recover).
//
// Records carry principals and message ids: an implementation that labels
// metrics must keep its label sets bounded (subjects, codes, gates,
// outcomes), never a principal or an id.
type Observer interface {
	// Audited sees every audit record the engine writes, as it queues it
	// (decisions, deliveries, quarantine, contracts…; Event names the
	// type), and the acceptance records a durable store keeps with the
	// message. Sequence and hash are not yet set. A refusal that the log
	// counts in a run rather than writing (docs/storage.md) is seen too;
	// the record written for the run is not. The record is
	// passed by value so that observing never moves the engine's records
	// to the heap.
	Audited(r AuditRecord)
	// Took reports how long one operation of stage took on subject (""
	// for a negotiation, which may span subjects).
	Took(stage Stage, subject string, d time.Duration)
	// Committed reports one store write: which log, how many records it
	// carried and how long it took.
	Committed(log CommitLog, records int, d time.Duration)
	// Noted counts one occurrence of n; label is bounded (a subject for
	// NoteRedelivery, an authentication method for NoteAuthFailure).
	Noted(n Note, label string)
}

// Stage is an operation whose latency the engine reports to an Observer.
type Stage string

// Stages.
const (
	StagePublish   Stage = "publish"   // Publish, from call to answer, refusals included; PublishBatch, the batch's call to answer for each of its messages
	StageNegotiate Stage = "negotiate" // Negotiate and Connect's negotiation
	StageDeliver   Stage = "deliver"   // a subscription's delivery, from hand-off to the handler's answer; a pull receive, from call to return, once per message handed out
	StageRequest   Stage = "request"   // Request, until the reply came or the wait ended
)

// CommitLog names the log a store write went to.
type CommitLog string

// Commit logs.
const (
	CommitMessages CommitLog = "messages" // a publish's append (with its acceptance record on a durable store)
	CommitAudit    CommitLog = "audit"    // a batch of chained audit records
)

// Note is an occurrence an Observer counts.
type Note string

// Notes.
const (
	NoteRedelivery  Note = "redelivery"   // a message handed out again (label: subject)
	NoteAuthFailure Note = "auth_failure" // a credential refused (label: the method tried)
	// NoteQuarantineSkipped is a refusal whose copy was not kept, its
	// principal past Options.QuarantineRate (label: subject).
	NoteQuarantineSkipped Note = "quarantine_skipped"
	// NoteReplyNotKept is a reply whose requester was not waiting and
	// that a bound on the replies kept for later claims left out (label:
	// subject).
	NoteReplyNotKept Note = "reply_not_kept"
	// NoteFanoutPanic is a panic of a subject's fan-out (a store read,
	// the decoder or the routing of one message), which it survived and
	// logged (label: subject).
	NoteFanoutPanic Note = "fanout_panic"
	// NotePanic is a panic the engine survived, logged with its stack
	// (label: where it was, one of the Panic* values; never a client's
	// text). A fan-out's panic is noted both as NoteFanoutPanic and as
	// NotePanic with PanicFanout.
	NotePanic Note = "panic"
)

// Where a panic the engine survived was: the label of NotePanic.
const (
	PanicGate          = "gate"          // a gate's Check: the message is refused INTERNAL
	PanicSubscription  = "subscription"  // a subscription's delivery loop or asynchronous handler: the subscription ends INTERNAL
	PanicFanout        = "fanout"        // a subject's fan-out (also NoteFanoutPanic, by subject)
	PanicObserver      = "observer"      // the Observer: the engine goes on as if the call had returned
	PanicAuthenticator = "authenticator" // the Authenticator: the credential is refused as unknown
	PanicBackground    = "background"    // the engine's background work (janitor, trims, cluster watch, renewals, audit writer and walk)
	PanicClock         = "clock"         // Options.Now: the system clock answers
)

// since is the start of an observed operation: the current time when an
// Observer is set, otherwise zero (and no clock is read).
func (e *Engine) since() time.Time {
	if e.opts.Observer == nil {
		return time.Time{}
	}
	return time.Now()
}

// took reports the operation that started at start (from since).
func (e *Engine) took(stage Stage, subject string, start time.Time) {
	if o := e.opts.Observer; o != nil && !start.IsZero() {
		e.observeTook(o, stage, subject, 1, time.Since(start))
	}
}

// tookEach reports n operations of stage on subject that shared the span
// since start: one clock read for all of them.
func (e *Engine) tookEach(stage Stage, subject string, n int, start time.Time) {
	if o := e.opts.Observer; o != nil && !start.IsZero() && n > 0 {
		e.observeTook(o, stage, subject, n, time.Since(start))
	}
}

// observeTook reports n operations of stage on subject that took d each.
func (e *Engine) observeTook(o Observer, stage Stage, subject string, n int, d time.Duration) {
	defer e.observerPanicked("Took")
	for range n {
		o.Took(stage, subject, d)
	}
}

// tookBatch reports PublishBatch's latency for each message of msgs that
// Publish did not answer itself (byPublish[i]; Publish reports its own):
// one clock read for the batch.
func (e *Engine) tookBatch(msgs []*Message, byPublish []bool, start time.Time) {
	o := e.opts.Observer
	if o == nil || start.IsZero() {
		return
	}
	defer e.observerPanicked("Took")
	d := time.Since(start)
	for i, m := range msgs {
		if m != nil && !byPublish[i] {
			o.Took(StagePublish, m.Subject, d)
		}
	}
}

// observeRecord hands r to the Observer.
func (e *Engine) observeRecord(r *AuditRecord) {
	if o := e.opts.Observer; o != nil {
		e.observeAudited(o, r)
	}
}

func (e *Engine) observeAudited(o Observer, r *AuditRecord) {
	defer e.observerPanicked("Audited")
	o.Audited(*r)
}

// committed reports one store write that started at start (from since).
func (e *Engine) committed(log CommitLog, records int, start time.Time) {
	if o := e.opts.Observer; o != nil && !start.IsZero() {
		e.observeCommitted(o, log, records, time.Since(start))
	}
}

func (e *Engine) observeCommitted(o Observer, log CommitLog, records int, d time.Duration) {
	defer e.observerPanicked("Committed")
	o.Committed(log, records, d)
}

// note counts one n.
func (e *Engine) note(n Note, label string) {
	noteTo(e.opts.Observer, e.opts.Logger, n, label)
}

// noteTo hands one n to o, if any, surviving its panic. Each Observer of
// a list (Observers) is handed the note under its own recover, so that one
// that panics leaves the others counting: a panic's note reaches the
// metrics even when the Observer that panicked comes first.
func noteTo(o Observer, log *slog.Logger, n Note, label string) {
	if list, ok := o.(multiObserver); ok {
		for _, one := range list {
			observeNoted(o, one, log, n, label)
		}
		return
	}
	if o != nil {
		observeNoted(o, o, log, n, label)
	}
}

// observeNoted hands n to one, an Observer of all (the engine's). A panic
// of it is logged and noted to all, except a panic of the note of an
// Observer's panic, which is only logged: noting it again would call the
// Observer that panicked, for ever.
func observeNoted(all, one Observer, log *slog.Logger, n Note, label string) {
	defer observerPanicked(all, log, "Noted", n != NotePanic || label != PanicObserver)
	one.Noted(n, label)
}

// observerPanicked, deferred by every call into the Observer (the
// observe* functions above, the only ones that make such calls), turns
// a panic of the Observer into a log line, with its stack, card numbers
// redacted, and the engine goes on as if the call had returned: an
// Observer is the application's code, and the engine calls it on its
// hot paths, often holding a lock or with a delivery not yet settled. Its
// panic unrecovered reached the publisher or the requester, wedged the
// audit writer or a subscription's end (a delivery never settled, a
// WebSocket connection's teardown waiting for it for ever), or ended the
// process from a goroutine of the engine's. The value is never returned:
// it may quote a record.
// The panic is noted (NotePanic, PanicObserver) to the same Observer.
func (e *Engine) observerPanicked(method string) {
	if p := recover(); p != nil {
		observerPanic(e.opts.Observer, e.opts.Logger, method, p, true)
	}
}

// observerPanicked is Engine.observerPanicked for the calls made without
// an engine at hand (noteTo); it notes the panic only when note is set.
func observerPanicked(o Observer, log *slog.Logger, method string, note bool) {
	if p := recover(); p != nil {
		observerPanic(o, log, method, p, note)
	}
}

func observerPanic(o Observer, log *slog.Logger, method string, p any, note bool) {
	logPanic(log, "an observer panicked in "+method+"; the engine goes on as if it had returned", panicText(p))
	if note {
		noteTo(o, log, NotePanic, PanicObserver)
	}
}

// credentialMethod names the method a refused credential was presented
// for: a client certificate, a JWT (grant or OIDC), a bearer token, or none.
func credentialMethod(c Credential) string {
	switch {
	case len(c.PeerCertificates) > 0:
		return string(AuthMTLS)
	case c.Bearer == "":
		return "none"
	case grant.LooksLikeJWT(c.Bearer):
		return "jwt"
	}
	return string(AuthToken)
}

// Stats is a snapshot of the engine's state, for gauges and consoles.
type Stats struct {
	// AuditRecords is the sequence of the last audit record written.
	AuditRecords uint64
	// QuarantineOpen counts quarantine records not yet released (of the
	// newest MaxStatsQuarantine at most).
	QuarantineOpen int
	// Groups are the consumer groups and cursors (pull cursors included)
	// of the catalog's subjects (and of any subject with a group in
	// memory), ordered by subject and group: those in
	// memory (in use, or with leases in flight; see
	// Options.MaxGroupsPerSubject) as the engine holds them, and, when the
	// store is a store.GroupLister, those in the store only (every
	// consumer gone) from their stored progress, with InFlight 0. When
	// the store is also a store.GroupSubjectLister, the stored groups of
	// subjects no longer in the catalog are listed too, marked
	// NotInCatalog. Stored groups are listed up to MaxStatsGroups in all,
	// those of the catalog's subjects first; past that a group not in
	// memory may be missing. Without a GroupLister only the groups in
	// memory are listed.
	Groups []GroupStats
	// Subscriptions counts the live subscriptions.
	Subscriptions int
	// Contracts counts the negotiated contracts in force: not expired,
	// not revoked.
	Contracts int
	// LastVerify is the result of the last VerifyAudit; zero before one.
	LastVerify VerifyResult
	// Subjects is what each subject of the catalog holds, ordered by
	// name; then, when the store is a store.MessageSubjectLister, each
	// subject no longer in the catalog that still holds messages, marked
	// NotInCatalog, ordered by name: nothing reads or trims those
	// messages until an admin purges them (PurgeSubject). Stats reads the
	// bounds of MaxStatsRemovedSubjects such subjects at most, the first
	// by name; past that one may be missing.
	Subjects []SubjectStats
}

// SubjectStats is what one subject holds, beside its retention bounds.
type SubjectStats struct {
	Subject string `json:"subject"`
	// Messages counts the retained messages, FirstSeq to LastSeq (0 and
	// 0 when there are none).
	Messages uint64 `json:"messages"`
	FirstSeq uint64 `json:"firstSeq,omitempty"`
	LastSeq  uint64 `json:"lastSeq,omitempty"`
	// Bytes is the length of the retained messages' stored envelopes
	// (store.ByteTrimmer's measure), for a subject with
	// retention.maxBytes on a store that counts them; 0 otherwise.
	Bytes uint64 `json:"bytes,omitempty"`
	// MaxMessages and MaxBytes are the subject's retention.maxMessages
	// and retention.maxBytes (0: no bound).
	MaxMessages int64 `json:"maxMessages,omitempty"`
	MaxBytes    int64 `json:"maxBytes,omitempty"`
	// NotInCatalog marks a subject the catalog no longer has (removed
	// from the policy) whose messages are still stored: no retention
	// trims them, and Bytes, MaxMessages and MaxBytes are 0. An admin
	// reclaims them with PurgeSubject.
	NotInCatalog bool `json:"notInCatalog,omitempty"`
}

// MaxStatsQuarantine bounds the quarantine records Stats reads.
const MaxStatsQuarantine = 10000

// MaxStatsGroups bounds the stored groups Stats lists, over every
// subject: past it, a group that is not in memory may be left out.
const MaxStatsGroups = 10000

// MaxStatsRemovedSubjects bounds the subjects not in the catalog whose
// bounds Stats reads (the first by name): past it, such a subject may be
// left out of Stats.Subjects.
const MaxStatsRemovedSubjects = 1000

// GroupStats is one consumer group's (or pubsub cursor's) position.
type GroupStats struct {
	Subject string `json:"subject"`
	Group   string `json:"group"`
	// Lag is how many retained messages lie past the group's floor (every
	// sequence at or below it is done) and are not done: trimmed messages
	// are not lag.
	Lag uint64 `json:"lag"`
	// InFlight counts the leases this node's consumers hold: messages
	// handed over and neither settled nor freed. A message nacked (or
	// failed) with a delay, given back, leased by another node, or whose
	// lease was lost to another node while its handler ran is not in
	// flight here.
	InFlight int `json:"inFlight"`
	// NotInCatalog marks a group of a subject the catalog no longer has
	// (removed from the policy): nothing consumes it any more, and its
	// stored progress goes once unused for Options.GroupRetention.
	NotInCatalog bool `json:"notInCatalog,omitempty"`
}

// Name is the group's name as its consumers gave it (or DefaultGroup):
// Group without the key of the selection (selector, filter, receive
// scope) the engine appends, after a '|', for the members of a group that
// select, each selection being a queue position of its own. The key holds
// route values, filter expressions and grant scopes: a report for those
// who may not see them shows Name. A cursor's Name is its Group.
func (g GroupStats) Name() string {
	if i := strings.IndexByte(g.Group, '|'); i >= 0 {
		return g.Group[:i]
	}
	return g.Group
}

// IsCursor reports whether g is a principal's pull cursor on a pubsub
// subject rather than a consumer group: its Group is "cursor:" and the
// principal's id (no consumer group's name starts so), which a report
// for those who may not see principals must not show.
func (g GroupStats) IsCursor() bool { return strings.HasPrefix(g.Group, cursorPrefix) }

// VerifyResult is the outcome of one VerifyAudit.
type VerifyResult struct {
	Time     time.Time `json:"time,omitzero"`
	OK       bool      `json:"ok"`
	Verified uint64    `json:"verified"`
	Error    string    `json:"error,omitempty"`
}

// Stats reads the engine's state: the audit head, the open quarantine,
// what each subject holds, each group's lag and leases. It costs an
// AuditHead read on a store that chains audit records itself (the
// write-ahead log's flushes its acceptances first), one quarantine
// listing, a Bounds read per subject of the catalog (and a
// Bytes read per subject with retention.maxBytes), one listing of the
// subjects with messages and a Bounds read per such subject not in the
// catalog (MaxStatsRemovedSubjects at most), one listing of the
// subjects with stored groups, a listing of each such subject's and each
// catalog subject's stored groups (MaxStatsGroups in all) and a Bounds
// read per subject with a group, so it suits a scrape or a console
// refresh, not a hot path.
func (e *Engine) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	if _, ok := e.store.(store.AuditChainer); ok {
		// Such a store chains the records (its own among them: the
		// write-ahead log's acceptances) and knows the head; the
		// auditor's, which it does not move, stays at 0.
		last, _, err := e.store.AuditHead(ctx)
		if err != nil {
			return Stats{}, storeError(err)
		}
		st.AuditRecords = last.Seq
	} else {
		e.auditor.mu.Lock()
		st.AuditRecords = e.auditor.seq
		e.auditor.mu.Unlock()
	}
	if v := e.lastVerify.Load(); v != nil {
		st.LastVerify = *v
	}
	e.subs.mu.RLock()
	st.Subscriptions = len(e.subs.all)
	e.subs.mu.RUnlock()
	st.Contracts = len(e.live.snapshot(e.now()))
	recs, err := e.store.ListQuarantine(ctx, time.Time{}, MaxStatsQuarantine)
	if err != nil {
		return st, storeError(err)
	}
	for _, r := range recs {
		if !r.Released {
			st.QuarantineOpen++
		}
	}
	if st.Subjects, err = e.subjectStats(ctx); err != nil {
		return st, err
	}
	groups, err := e.groupStats(ctx)
	st.Groups = groups
	return st, err
}

// subjectStats reports what each subject of the catalog holds: one Bounds
// read each, and one Bytes read for each with retention.maxBytes; then
// removedSubjectStats.
func (e *Engine) subjectStats(ctx context.Context) ([]SubjectStats, error) {
	catalog := e.catalog.Load().subjects
	out := make([]SubjectStats, 0, len(catalog))
	bt, _ := e.store.(store.ByteTrimmer)
	for name, s := range catalog {
		r := s.policy.Retention
		ss := SubjectStats{Subject: name, MaxMessages: r.MaxMessages, MaxBytes: r.MaxBytes}
		first, last, err := e.store.Bounds(ctx, name)
		if err != nil {
			return out, storeError(err)
		}
		if first > 0 && last >= first {
			ss.Messages, ss.FirstSeq, ss.LastSeq = last-first+1, first, last
		}
		if bt != nil && r.MaxBytes > 0 {
			if ss.Bytes, err = bt.Bytes(ctx, name); err != nil {
				return out, storeError(err)
			}
		}
		out = append(out, ss)
	}
	slices.SortFunc(out, func(a, b SubjectStats) int { return strings.Compare(a.Subject, b.Subject) })
	return e.removedSubjectStats(ctx, catalog, out)
}

// removedSubjectStats appends to out, by name, the subjects not in
// catalog that hold messages, when the store names the subjects with
// messages (store.MessageSubjectLister): one listing, and one Bounds read
// for each of the first MaxStatsRemovedSubjects of them by name.
func (e *Engine) removedSubjectStats(ctx context.Context, catalog map[string]*subject, out []SubjectStats) ([]SubjectStats, error) {
	ml, ok := e.store.(store.MessageSubjectLister)
	if !ok {
		return out, nil
	}
	names, err := ml.ListMessageSubjects(ctx)
	if err != nil {
		return out, storeError(err)
	}
	names = slices.DeleteFunc(names, func(name string) bool { return catalog[name] != nil })
	slices.Sort(names)
	for _, name := range names[:min(len(names), MaxStatsRemovedSubjects)] {
		first, last, err := e.store.Bounds(ctx, name)
		if err != nil {
			return out, storeError(err)
		}
		if first > 0 && last >= first { // not purged since the listing
			out = append(out, SubjectStats{Subject: name, Messages: last - first + 1, FirstSeq: first, LastSeq: last, NotInCatalog: true})
		}
	}
	return out, nil
}

// groupStats reports the groups of every subject of the catalog, of every
// subject with a group in memory and, when the store is a
// store.GroupSubjectLister, of every subject with stored progress (those
// no longer in the catalog marked so): a loaded group from memory, any
// other from its stored state (when the store is a store.GroupLister,
// MaxStatsGroups of them in all, the catalog's subjects first), with one
// Bounds read per subject that has a group. Groups come ordered by
// subject and name.
func (e *Engine) groupStats(ctx context.Context) ([]GroupStats, error) {
	loaded := map[string]map[string]*group{}
	e.groups.mu.Lock()
	for key, g := range e.groups.m {
		select {
		case <-g.loaded:
			if g.err != nil {
				continue
			}
		default: // still loading: the store has its state
			continue
		}
		if loaded[key.Subject] == nil {
			loaded[key.Subject] = map[string]*group{}
		}
		loaded[key.Subject][key.Group] = g
	}
	e.groups.mu.Unlock()
	catalog := e.catalog.Load().subjects
	subjects := slices.Collect(maps.Keys(loaded))
	lister, _ := e.store.(store.GroupLister)
	if lister != nil {
		for name := range catalog {
			if loaded[name] == nil {
				subjects = append(subjects, name)
			}
		}
		if sl, ok := e.store.(store.GroupSubjectLister); ok {
			names, err := sl.ListGroupSubjects(ctx)
			if err != nil {
				return nil, storeError(err)
			}
			for _, name := range names {
				if loaded[name] == nil && catalog[name] == nil {
					subjects = append(subjects, name)
				}
			}
		}
	}
	// The catalog's subjects take the budget first: a removed subject
	// with many groups leaves out none of a subject in use.
	slices.SortFunc(subjects, func(a, b string) int {
		if inA, inB := catalog[a] != nil, catalog[b] != nil; inA != inB {
			if inA {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	budget := MaxStatsGroups
	type subjectGroups struct {
		name   string
		mem    map[string]*group
		stored map[string]store.GroupState
	}
	var found []subjectGroups
	total := 0
	for _, subject := range subjects {
		var stored map[string]store.GroupState
		if lister != nil && budget > 0 {
			var err error
			if stored, err = lister.ListGroups(ctx, subject, budget); err != nil {
				return nil, storeError(err)
			}
			budget -= len(stored)
		}
		if mem := loaded[subject]; len(mem) > 0 || len(stored) > 0 {
			found = append(found, subjectGroups{subject, mem, stored})
			total += len(mem) + len(stored)
		}
	}
	slices.SortFunc(found, func(a, b subjectGroups) int { return strings.Compare(a.name, b.name) })
	out := make([]GroupStats, 0, total)
	var names []string
	for _, sg := range found {
		first, last, err := e.store.Bounds(ctx, sg.name)
		if err != nil {
			return out, storeError(err)
		}
		names = names[:0]
		for name := range sg.mem {
			names = append(names, name)
		}
		for name := range sg.stored {
			if sg.mem[name] == nil { // one in memory is fresher
				names = append(names, name)
			}
		}
		slices.Sort(names)
		removed := catalog[sg.name] == nil
		for _, name := range names {
			gs := GroupStats{Subject: sg.name, Group: name, NotInCatalog: removed}
			if g := sg.mem[name]; g != nil {
				g.mu.Lock()
				gs.Lag, gs.InFlight = lagOf(&g.prog, first, last), g.held()
				g.mu.Unlock()
			} else {
				p := sg.stored[name]
				gs.Lag = lagOf(&p, first, last)
			}
			out = append(out, gs)
		}
	}
	return out, nil
}

// lagOf is how many of the retained messages, first..last, lie past p's
// floor and are not done. Messages retention trimmed (or a purge removed)
// are no lag: no consumer can get them any more, and a group the engine
// has not loaded since keeps its older floor in the store. Nor are
// sequences past last, done ones included: Stats reads the bounds before
// the progress, and messages published and acked in between are in Done.
func lagOf(p *store.GroupState, first, last uint64) uint64 {
	lo := max(p.Floor+1, first)
	if last < lo {
		return 0
	}
	from, _ := slices.BinarySearch(p.Done, lo) // Done below lo are trimmed
	to, found := slices.BinarySearch(p.Done, last)
	if found {
		to++
	}
	return last - lo + 1 - uint64(max(to-from, 0))
}

// Observers is an Observer that hands every call to each of obs in turn
// (nil ones left out); with none it is nil.
func Observers(obs ...Observer) Observer {
	var list multiObserver
	for _, o := range obs {
		if o != nil {
			list = append(list, o)
		}
	}
	switch len(list) {
	case 0:
		return nil
	case 1:
		return list[0]
	}
	return list
}

type multiObserver []Observer

func (m multiObserver) Audited(r AuditRecord) {
	for _, o := range m {
		o.Audited(r)
	}
}

func (m multiObserver) Took(stage Stage, subject string, d time.Duration) {
	for _, o := range m {
		o.Took(stage, subject, d)
	}
}

func (m multiObserver) Committed(log CommitLog, records int, d time.Duration) {
	for _, o := range m {
		o.Committed(log, records, d)
	}
}

func (m multiObserver) Noted(n Note, label string) {
	for _, o := range m {
		o.Noted(n, label)
	}
}
