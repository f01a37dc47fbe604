package pigeon

import (
	"context"
	"errors"

	"pigeon/store"
)

// Message returns the retained message with the given id as a receiver
// gets it, when c's contract allows receiving on its subject at this
// moment: for a transport that lets go of a delivery's data while it waits
// for a slow client and needs it again. It fails with MESSAGE_NOT_FOUND for
// an id the broker does not hold (never seen, or trimmed) or one it holds
// where c may not receive it (a subject not in c's contract, or not
// granting receive, or no longer in the catalog; outside the routes c's
// receive is scoped to), and with the contract's refusal otherwise. The
// contract itself (none, another principal's, revoked, expired, a role
// gone) is judged before the id is looked up, and a stale contract is
// told only to a caller that may receive on the message's subject, so the
// answer never tells a caller which ids exist beyond what it may read. It
// is not audited: the delivery it serves is.
func (e *Engine) Message(ctx context.Context, c Caller, id string) (*Message, error) {
	if e.closed.Load() {
		return nil, errShutdown()
	}
	if c.Principal == nil { // no one holds a contract
		return nil, NewError(CodeContractPrincipalMismatch, "%s", mismatchReason)
	}
	// No subject: a contract fit for use answers SUBJECT_NOT_FOUND.
	if _, code, reason := e.checkContract(ctx, c.ContractID, c.Principal, nil, OpReceive); code != CodeSubjectNotFound {
		return nil, NewError(code, "%s", reason)
	}
	notFound := NewError(CodeMessageNotFound, "no message %q", id)
	sm, err := e.store.Lookup(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound
	}
	if err != nil {
		return nil, storeError(err)
	}
	s := e.subject(sm.Subject)
	k, code, reason := e.checkContract(ctx, c.ContractID, c.Principal, s, OpReceive)
	switch code {
	case CodeOK:
	case CodeSubjectNotFound, CodeSubjectNotInContract, CodeOperationNotInContract:
		return nil, notFound
	case CodeContractStale:
		if !e.mayReceive(ctx, c.ContractID, s) {
			return nil, notFound
		}
		fallthrough
	default:
		return nil, NewError(code, "%s", reason)
	}
	if !e.inReceiveScope(sm, k.permits[s.name]) {
		return nil, notFound
	}
	return decodeStored(sm)
}

// mayReceive reports whether contract id grants receive on s, as it was
// negotiated (its policy since changed).
func (e *Engine) mayReceive(ctx context.Context, id string, s *subject) bool {
	k, err := e.lookupContract(ctx, id)
	if err != nil || k == nil {
		return false
	}
	g := k.permits[s.name]
	return g != nil && g.ops&opBit(OpReceive) != 0
}
