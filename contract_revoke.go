package pigeon

import (
	"context"

	"pigeon/store"
)

// RevokeContract revokes a contract. Only its holder may revoke it; every
// later use fails with CONTRACT_REVOKED. In a cluster it returns once every
// live node applied the revocation (see ClusterBarrier), or fails with
// CLUSTER_UNCONFIRMED, the contract revoked all the same. It takes access
// away only: it goes on once Shutdown began, while the store is open (see
// Engine.Shutdown).
func (e *Engine) RevokeContract(ctx context.Context, p *Principal, id string) error {
	leave, err := e.enterRevocation() // Shutdown waits for its record and what it hands back (inflight.go)
	if err != nil {
		return err
	}
	defer leave()
	c, err := e.lookupContract(ctx, id)
	if err != nil {
		return err
	}
	if c == nil {
		return NewError(CodeContractNotFound, "unknown contract")
	}
	if !c.heldBy(p) {
		return NewError(CodeContractPrincipalMismatch, mismatchReason)
	}
	if !c.revoked.Swap(true) {
		e.live.release(c.info.Principal, id) // refused from here on, on this node
	}
	if err := e.storeRevocation(ctx, c, p); err != nil {
		return err // revoked here; a retry stores it
	}
	return e.clusterBarrier(ctx) // a retry waits for the other nodes again
}

// storeRevocation writes c's revocation to the store, audits it and tells
// the contract's subscriptions and the other nodes, once: a call that
// finds it stored does nothing, and one whose write failed leaves it for
// the next (a retry of RevokeContract), so that a revocation answered
// with an error is not answered nil later while the store still holds
// the contract unrevoked (a restart would honour it again).
func (e *Engine) storeRevocation(ctx context.Context, c *contract, p *Principal) error {
	if c.revokeStored.Load() {
		return nil
	}
	c.revokeMu.Lock()
	defer c.revokeMu.Unlock()
	if c.revokeStored.Load() {
		return nil
	}
	if err := e.saveContract(ctx, c); err != nil {
		return err
	}
	c.revokeStored.Store(true)
	e.audit(ctx, EventContractRevoked.record(OutcomeDeny, CodeContractRevoked, store.AuditRecord{Principal: p.ID, ContractID: c.info.ID}))
	e.onContractRevoked(c.info.ID)
	return nil
}
