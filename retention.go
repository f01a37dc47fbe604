package pigeon

import (
	"context"
	"strconv"
	"time"

	"pigeon/store"
)

// DefaultQuarantineRetention is how long quarantine records are kept when
// Options.QuarantineRetention is zero.
const DefaultQuarantineRetention = 30 * 24 * time.Hour

// DefaultGroupRetention is how long the progress of an unused consumer
// group of a subject that keeps its messages for good is kept when
// Options.GroupRetention is zero.
const DefaultGroupRetention = 30 * 24 * time.Hour

// A grant is forgotten grantPruneGrace after it expired (so a node whose
// clock runs behind still finds it expired, not unknown: either way it is
// refused), at most grantPruneBatch of them per pass, each a store delete
// under the directory's lock.
const (
	grantPruneGrace = time.Hour
	grantPruneBatch = 1000
)

// enforceRetention trims what policy no longer keeps: each subject's
// messages older than retention.messagesMs and beyond the newest
// retention.maxMessages or retention.maxBytes (trimMessages), and the
// stored progress of its groups unused for as long as it keeps messages (for
// Options.GroupRetention where it keeps them for good), the stored
// progress of groups of subjects no longer in the catalog unused for
// Options.GroupRetention (removedGroups), audit records older than the
// longest retention.auditMs of any subject (recorded retention.audit),
// grants that expired over grantPruneGrace ago (their revocations too),
// and quarantine records older than Options.QuarantineRetention (recorded
// retention.quarantine). It runs in the background and never blocks
// publishers for longer than the store's trim step.
func (e *Engine) enforceRetention(ctx context.Context) {
	now := e.now()
	var auditKeep time.Duration
	gp, _ := e.store.(store.GroupPruner)
	catalog := e.catalog.Load().subjects
	for name, s := range catalog {
		if err := e.trimSubject(ctx, name, s, now); err != nil {
			// The groups wait for the messages they handled to go.
			e.opts.Logger.Error("retention: trim messages", "subject", name, "err", err)
			continue
		}
		groupKeep := e.opts.GroupRetention
		if ms := s.policy.Retention.MessagesMs; ms > 0 {
			if _, ok := e.store.(store.Trimmer); ok {
				groupKeep = time.Duration(ms) * time.Millisecond
			}
		}
		if gp != nil && groupKeep > 0 {
			n, err := e.pruneGroups(ctx, gp, name, now.Add(-groupKeep))
			if err != nil {
				e.opts.Logger.Error("retention: delete the progress of unused groups", "subject", name, "err", err)
			}
			if n > 0 {
				e.audit(ctx, EventRetentionGroups.record("", CodeOK, store.AuditRecord{Subject: name, PolicyID: s.policyID, Ref: strconv.Itoa(n)}))
			}
		}
	}
	if gp != nil {
		e.pruneRemovedGroups(ctx, gp, catalog, now)
	}
	for _, s := range catalog {
		auditKeep = max(auditKeep, time.Duration(s.policy.Retention.AuditMs)*time.Millisecond)
	}
	if at, ok := e.store.(store.AuditTrimmer); ok && auditKeep > 0 {
		e.trimAudit(ctx, at, now.Add(-auditKeep))
	}
	if _, err := e.dir.pruneGrants(ctx, now.Add(-grantPruneGrace), grantPruneBatch); err != nil {
		e.opts.Logger.Error("retention: forget expired grants", "err", err)
	}
	if qt, ok := e.store.(store.QuarantineTrimmer); ok {
		keep := e.opts.QuarantineRetention
		if keep <= 0 {
			keep = DefaultQuarantineRetention
		}
		n, err := qt.TrimQuarantineBefore(ctx, now.Add(-keep))
		if err != nil {
			e.opts.Logger.Error("retention: trim quarantine", "err", err)
		}
		if n > 0 {
			e.audit(ctx, EventRetentionQuarantine.record("", CodeOK, store.AuditRecord{Ref: strconv.Itoa(n)}))
		}
	}
}

// trimAudit removes the audit records from before t and writes one
// retention.audit record naming how many went and the checkpoint the
// chain now starts after, so that the chain itself says when and how far
// it was cut.
func (e *Engine) trimAudit(ctx context.Context, at store.AuditTrimmer, t time.Time) {
	n, err := at.TrimAuditBefore(ctx, t)
	if err != nil {
		e.opts.Logger.Error("retention: trim audit", "err", err)
	}
	if n <= 0 {
		return
	}
	_, cp, herr := e.store.AuditHead(ctx)
	if herr != nil {
		e.opts.Logger.Error("retention: read the audit checkpoint", "err", herr)
	}
	e.audit(ctx, EventRetentionAudit.record("", CodeOK, store.AuditRecord{Ref: strconv.Itoa(n) + " records through " + strconv.FormatUint(cp.Seq, 10) + " (hash " + cp.Hash + ")"}))
}

// trimSubject runs trimMessages for subject name, one trim at a time
// (the retention pass and the trims askTrim queues), and then records
// what the subject holds in its bounds: its sequences for the count
// bound, its bytes for the byte bound.
func (e *Engine) trimSubject(ctx context.Context, name string, s *subject, now time.Time) error {
	e.trimMu.Lock()
	defer e.trimMu.Unlock()
	err := e.trimMessages(ctx, name, s, now)
	b := s.bounds
	if b == nil {
		return err
	}
	if c := b.count; c != nil {
		first, last, berr := e.store.Bounds(ctx, name)
		if berr != nil {
			first, last = 0, c.cutAt.Load()
		}
		c.trimmed(first, last, err == nil)
	}
	if y := b.bytes; y != nil {
		var held uint64
		berr := err
		if bt, ok := e.store.(store.ByteTrimmer); ok && berr == nil {
			held, berr = bt.Bytes(ctx, name)
		}
		y.trimmed(held, berr == nil)
	}
	b.asked.Store(false)
	// Messages accepted while the trim ran asked for nothing (one ask at
	// a time): if they already pass a bound, ask again for them, since no
	// later message may come to.
	if _, last, berr := e.store.Bounds(ctx, name); berr == nil {
		e.askTrim(s, last, 0)
	}
	return err
}

// trimMessages trims the messages of subject name that its retention no
// longer keeps: those accepted over retention.messagesMs before now (when
// the store is a store.Trimmer), then the oldest beyond the newest
// retention.maxMessages (when it is a store.SeqTrimmer), then the oldest
// beyond retention.maxBytes (when it is a store.ByteTrimmer). One
// retention.messages record audits how many went. Then it raises the
// floors of the subject's groups in memory past the first retained
// message (raiseFloors), every pass, not only one that trimmed: another
// node may have trimmed, or a pass failed to raise. It returns a trim's
// error, after auditing what went before it; the floors then wait for
// the next pass.
func (e *Engine) trimMessages(ctx context.Context, name string, s *subject, now time.Time) error {
	r := s.policy.Retention
	tr, _ := e.store.(store.Trimmer)
	st, _ := e.store.(store.SeqTrimmer)
	bt, _ := e.store.(store.ByteTrimmer)
	byAge, byCount, bySize := r.MessagesMs > 0 && tr != nil, r.MaxMessages > 0 && st != nil, r.MaxBytes > 0 && bt != nil
	if !byAge && !byCount && !bySize {
		return nil
	}
	var n int
	var err error
	if byAge {
		n, err = tr.TrimBefore(ctx, name, now.Add(-time.Duration(r.MessagesMs)*time.Millisecond))
	}
	if byCount && err == nil {
		var k int
		k, err = trimToCount(ctx, e.store, st, name, uint64(r.MaxMessages))
		n += k
	}
	if bySize && err == nil {
		var k int
		k, err = bt.TrimToBytes(ctx, name, uint64(r.MaxBytes))
		n += k
	}
	// The engine's cache lets go of what the store no longer holds (this
	// pass's trims, or another node's), so that no subscriber started at
	// an older sequence, or lagging behind the trim, is handed it.
	if first, _, berr := e.store.Bounds(ctx, name); berr == nil && first > 0 {
		e.recent.forget(name, first)
	}
	if n > 0 {
		e.audit(ctx, EventRetentionMessages.record("", CodeOK, store.AuditRecord{Subject: name, PolicyID: s.policyID, Ref: strconv.Itoa(n)}))
	}
	if err != nil {
		return err
	}
	if err := e.raiseFloors(ctx, name); err != nil {
		e.opts.Logger.Error("retention: raise the floors of groups past trimmed messages", "subject", name, "err", err)
	}
	return nil
}

// trimToCount removes the oldest messages of subject beyond the newest
// keep, as the store's bounds stand when it looks; messages published
// meanwhile stay for the next pass.
func trimToCount(ctx context.Context, ml store.MessageLog, st store.SeqTrimmer, subject string, keep uint64) (int, error) {
	first, last, err := ml.Bounds(ctx, subject)
	if err != nil || first == 0 || last < first || last-first+1 <= keep {
		return 0, err
	}
	return st.TrimThrough(ctx, subject, last-keep)
}

// pruneRemovedGroups deletes the stored progress of the groups of each
// subject not in catalog (removed from the policy) that have been unused
// for Options.GroupRetention (negative: kept for good), when the store
// names the subjects it keeps progress for (store.GroupSubjectLister).
// Nothing consumes such a subject any more, but the same age rule as on a
// subject in the catalog keeps the progress of one removed by mistake, or
// still served by a node of a cluster that has not yet loaded the new
// policy, until it has been unused as long: a subject put back within
// that time goes on where its groups were.
func (e *Engine) pruneRemovedGroups(ctx context.Context, gp store.GroupPruner, catalog map[string]*subject, now time.Time) {
	sl, ok := e.store.(store.GroupSubjectLister)
	if !ok || e.opts.GroupRetention <= 0 {
		return
	}
	names, err := sl.ListGroupSubjects(ctx)
	if err != nil {
		e.opts.Logger.Error("retention: list the subjects with stored progress", "err", err)
		return
	}
	for _, name := range names {
		if catalog[name] != nil {
			continue
		}
		n, err := e.pruneGroups(ctx, gp, name, now.Add(-e.opts.GroupRetention))
		if err != nil {
			e.opts.Logger.Error("retention: delete the progress of unused groups of a subject not in the catalog", "subject", name, "err", err)
		}
		if n > 0 {
			e.audit(ctx, EventRetentionGroups.record("", CodeOK, store.AuditRecord{Subject: name, Ref: strconv.Itoa(n)}))
		}
	}
}
