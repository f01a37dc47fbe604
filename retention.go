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
// messages older than retention.messagesMs (raising the floors of its
// groups in memory past them, raiseFloors) and the stored progress of its
// groups unused for as long (for Options.GroupRetention where the subject
// keeps its messages), the stored progress of groups of subjects no longer
// in the catalog unused for Options.GroupRetention (removedGroups), audit
// records older than the longest
// retention.auditMs of any subject, grants that expired over
// grantPruneGrace ago (their revocations too), and quarantine records older
// than Options.QuarantineRetention. It runs in the background and never
// blocks publishers for longer than the store's trim step.
func (e *Engine) enforceRetention(ctx context.Context) {
	now := e.now()
	var auditKeep time.Duration
	tr, _ := e.store.(store.Trimmer)
	gp, _ := e.store.(store.GroupPruner)
	catalog := e.catalog.Load().subjects
	for name, s := range catalog {
		groupKeep := e.opts.GroupRetention
		if ms := s.policy.Retention.MessagesMs; ms > 0 && tr != nil {
			n, err := tr.TrimBefore(ctx, name, now.Add(-time.Duration(ms)*time.Millisecond))
			if err != nil {
				// The groups wait for the messages they handled to go.
				e.opts.Logger.Error("retention: trim messages", "subject", name, "err", err)
				continue
			}
			if n > 0 {
				e.audit(ctx, EventRetentionMessages.record("", CodeOK, store.AuditRecord{Subject: name, PolicyID: s.policyID, Ref: strconv.Itoa(n)}))
			}
			// Every pass, not only one that trimmed: another node may
			// have trimmed, or a pass failed to raise.
			if err := e.raiseFloors(ctx, name); err != nil {
				e.opts.Logger.Error("retention: raise the floors of groups past trimmed messages", "subject", name, "err", err)
			}
			groupKeep = time.Duration(ms) * time.Millisecond
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
		if _, err := at.TrimAuditBefore(ctx, now.Add(-auditKeep)); err != nil {
			e.opts.Logger.Error("retention: trim audit", "err", err)
		}
	}
	if _, err := e.dir.pruneGrants(ctx, now.Add(-grantPruneGrace), grantPruneBatch); err != nil {
		e.opts.Logger.Error("retention: forget expired grants", "err", err)
	}
	if qt, ok := e.store.(store.QuarantineTrimmer); ok {
		keep := e.opts.QuarantineRetention
		if keep <= 0 {
			keep = DefaultQuarantineRetention
		}
		if _, err := qt.TrimQuarantineBefore(ctx, now.Add(-keep)); err != nil {
			e.opts.Logger.Error("retention: trim quarantine", "err", err)
		}
	}
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
