package pigeon

import (
	"context"
	"strconv"

	"pigeon/store"
)

// PurgeSubject removes every retained message of subject, a subject no
// longer in the catalog (removed from the policy), and returns how many
// went. Such messages are otherwise kept for good: nothing can read them
// (no policy grants it) and no retention trims them (retention follows
// the catalog), so this is how an operator reclaims their storage.
//
// Only a principal with RoleAdmin may purge (FORBIDDEN otherwise). A
// subject in this node's catalog is refused with CONFLICT: its own
// retention governs its messages. In a cluster the catalog is each node's
// own: purge only once every node runs a policy without the subject, or a
// node still serving it loses its messages.
//
// The messages go as a retention trim removes them (store.SeqTrimmer,
// through the subject's last sequence): no sequence is ever reused, their
// ids stop resolving, and a live idempotency key keeps answering with its
// original as the store does for trims. One subject.purged audit record,
// with the admin as principal, says how many went. Purging a subject
// with no messages (an unknown one, or one purged already) removes
// nothing, writes no record and returns 0. The stored progress of the
// subject's groups stays; group retention deletes it
// (Options.GroupRetention). A store without SeqTrimmer is refused with
// BAD_REQUEST, and so is an empty subject.
//
// Each refusal (FORBIDDEN, CONFLICT, BAD_REQUEST) writes one purge.denied
// record with the caller as principal (empty for a nil one), the subject
// and the refusal's code; a run of them from one principal is coalesced
// like the refusals that judge who asks (docs/storage.md). A purge
// refused because the audit log cannot be written (the code of the
// store's failure) writes none: that log is the one that failed.
//
// PurgeSubject is safe for concurrent use; it waits for a retention pass
// that is trimming, and holds catalog loads off until it is done.
func (e *Engine) PurgeSubject(ctx context.Context, p *Principal, subject string) (int, error) {
	if !e.ops.enter() { // Shutdown waits for its record (inflight.go)
		return 0, errShutdown()
	}
	defer e.ops.leave()
	if !p.HasRole(RoleAdmin) {
		return 0, e.refusePurge(ctx, p, subject, NewError(CodeForbidden, "purging a subject's messages requires the role %s", RoleAdmin))
	}
	if subject == "" {
		return 0, e.refusePurge(ctx, p, subject, NewError(CodeBadRequest, "a subject is required"))
	}
	st, ok := e.store.(store.SeqTrimmer)
	if !ok {
		return 0, e.refusePurge(ctx, p, subject, NewError(CodeBadRequest, "the store cannot remove messages (it is no store.SeqTrimmer)"))
	}
	if err := e.auditGuard(ctx); err != nil {
		return 0, err
	}
	// The catalog cannot take the subject in while its messages go, and
	// the purge is one trim among the retention pass's.
	e.catMu.Lock()
	if e.subject(subject) != nil {
		e.catMu.Unlock()
		return 0, e.refusePurge(ctx, p, subject, NewError(CodeConflict, "subject %q is in the catalog: its retention governs its messages; purge it once the policy no longer has it", subject))
	}
	defer e.catMu.Unlock()
	e.trimMu.Lock()
	defer e.trimMu.Unlock()
	first, last, err := e.store.Bounds(ctx, subject)
	if err != nil {
		return 0, storeError(err)
	}
	if first == 0 || last < first {
		return 0, nil
	}
	n, err := st.TrimThrough(ctx, subject, last)
	e.recent.forget(subject, last+1) // what went, or may have before a failure
	if n > 0 {
		// What went before a failure is on the record too.
		if aerr := e.audit(ctx, EventSubjectPurged.record(OutcomeAllow, CodeOK, store.AuditRecord{Subject: subject, Principal: p.ID, Ref: strconv.Itoa(n)})); aerr != nil && err == nil {
			return n, WrapError(ErrorCode(storeError(aerr)), aerr, "%d messages of %q purged, but the audit record could not be written", n, subject)
		}
	}
	if err != nil {
		return n, storeError(err)
	}
	return n, nil
}

// refusePurge writes the purge.denied record of refused, p's purge of
// subject, and returns refused. The refusal stands whether or not its
// record could be written.
func (e *Engine) refusePurge(ctx context.Context, p *Principal, subject string, refused *Error) *Error {
	var who string
	if p != nil {
		who = p.ID
	}
	e.audit(ctx, EventPurgeDenied.record(OutcomeDeny, refused.Code, store.AuditRecord{Subject: subject, Principal: who}))
	return refused
}
