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
// an id the broker does not hold (never seen, or trimmed) or one outside
// the routes c's receive is scoped to, and with the contract's refusal
// otherwise. It is not audited: the delivery it serves is.
func (e *Engine) Message(ctx context.Context, c Caller, id string) (*Message, error) {
	if e.closed.Load() {
		return nil, errShutdown()
	}
	sm, err := e.store.Lookup(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, NewError(CodeMessageNotFound, "no message %q", id)
	}
	if err != nil {
		return nil, storeError(err)
	}
	s := e.subject(sm.Subject)
	k, code, reason := e.checkContract(ctx, c.ContractID, c.Principal, s, OpReceive)
	if code != CodeOK {
		return nil, NewError(code, "%s", reason)
	}
	if !e.inReceiveScope(sm, k.permits[s.name]) {
		return nil, NewError(CodeMessageNotFound, "no message %q", id)
	}
	return decodeStored(sm)
}
