package pigeon

import (
	"context"
	"time"

	"pigeon/store"
)

// RenewContract moves the expiry of contract id, held by p, to ttl from
// now (0: Options.ContractTTL), bounded as negotiation bounds it: at most
// Options.MaxContractTTL, and no later than the credential behind p
// (Principal.Expires) or the grant the contract was negotiated with. The
// contract keeps its id, subjects, operations and scopes, and what runs
// under it goes on: a subscription does not end at the old expiry. A
// renewal never shortens a contract; one that would not lengthen it
// changes nothing.
//
// p is the principal as its credential stands now (an expired one is
// UNAUTHENTICATED, a revoked grant GRANT_REVOKED), and the contract is
// checked as every use checks it: CONTRACT_NOT_FOUND,
// CONTRACT_PRINCIPAL_MISMATCH, CONTRACT_REVOKED, CONTRACT_EXPIRED (an
// expired contract is not brought back: negotiate again),
// GRANT_REVOKED for a role it relied on, and CONTRACT_STALE when the
// policy of one of its subjects changed since. A renewal is audited as
// contract.renewed, a refusal as contract.denied naming the contract.
// In a cluster the other nodes read the new expiry from the store.
func (e *Engine) RenewContract(ctx context.Context, p *Principal, id string, ttl time.Duration) (Contract, error) {
	if !e.ops.enter() { // Shutdown waits for its record (inflight.go)
		return nil, errShutdown()
	}
	defer e.ops.leave()
	if err := e.auditGuard(ctx); err != nil {
		return nil, err
	}
	ttl, err := e.contractTTL(ttl)
	if err != nil {
		return nil, err
	}
	deny := func(err error) (Contract, error) {
		e.audit(ctx, EventContractDenied.record(OutcomeDeny, ErrorCode(err), store.AuditRecord{Principal: p.ID, ContractID: id}))
		return nil, err
	}
	now := e.now()
	if p.expiredAt(now) {
		return deny(NewError(CodeUnauthenticated, "the credential has expired (at %s); reconnect with a fresh one",
			p.Expires.UTC().Format(time.RFC3339)))
	}
	if rp := e.opts.NegotiateRate; rp.PerSecond > 0 && !e.limiter.take(rateKey{kind: limitNegotiate, principal: p.ID}, rp, now) {
		return deny(NewError(CodeRateLimited, "negotiation rate limit exceeded for this principal (renewals count)"))
	}
	if p, err = e.currentPrincipal(p, now); err != nil {
		return deny(err)
	}
	c, err := e.lookupContract(ctx, id)
	switch {
	case err != nil:
		return nil, err
	case c == nil:
		return deny(NewError(CodeContractNotFound, "unknown contract"))
	case !c.heldBy(p):
		return deny(NewError(CodeContractPrincipalMismatch, mismatchReason))
	case c.revoked.Load():
		return deny(NewError(CodeContractRevoked, "the contract was revoked"))
	case e.contractInDoubt(id):
		return deny(NewError(CodeStoreUnavailable, "%s", doubtText))
	case !now.Before(c.expiresAt()) && !e.renewedElsewhere(ctx, c, now):
		return deny(NewError(CodeContractExpired, "the contract has expired; negotiate a new one"))
	}
	if code, reason := e.checkAccess(c); code != CodeOK {
		return deny(NewError(code, "%s", reason))
	}
	cat := e.catalog.Load()
	for name, g := range c.permits {
		if s := cat.subjects[name]; s == nil || s.digest != g.digest {
			return deny(NewError(CodeContractStale, "the policy of subject %q changed; negotiate again", name))
		}
	}
	at := now.Add(ttl)
	for _, grant := range []string{p.grantID, c.info.GrantID} {
		if grant == "" {
			continue
		}
		if end, ok := e.dir.grantExpiry(grant); ok && end.Before(at) {
			at = end
		}
	}
	if !p.Expires.IsZero() && p.Expires.Before(at) {
		at = p.Expires
	}
	old := c.exp.Load()
	for {
		if !at.After(*old) {
			return c, nil
		}
		if c.exp.CompareAndSwap(old, &at) {
			break
		}
		old = c.exp.Load()
	}
	// A panic of the store's write is a failed write: the expiry goes
	// back, as it does after an error, rather than stay later in memory
	// than in the store.
	if err := e.caught("saving a renewed contract", func() error { return e.saveContract(ctx, c) }); err != nil {
		c.exp.CompareAndSwap(&at, old)
		return nil, err
	}
	if c.revoked.Load() {
		// Revoked while it was renewed: the store keeps it revoked
		// (saveContract), and the renewal gave nothing.
		return deny(NewError(CodeContractRevoked, "the contract was revoked"))
	}
	e.live.extend(c.info.Principal, id, at)
	if err := e.audit(ctx, EventContractRenewed.record(OutcomeAllow, CodeOK, store.AuditRecord{Principal: p.ID, ContractID: id, Ref: authRef(p.Method)})); err != nil {
		return nil, err
	}
	return c, nil
}

// contractTTL is the lifetime a negotiation or renewal asking for ttl
// gets: the default for 0; INVALID_ARGUMENT for a negative one or one
// above Options.MaxContractTTL.
func (e *Engine) contractTTL(ttl time.Duration) (time.Duration, error) {
	switch {
	case ttl < 0:
		return 0, NewError(CodeInvalidArgument, "a contract ttl must not be negative")
	case ttl == 0:
		return min(e.opts.ContractTTL, e.opts.MaxContractTTL), nil
	case ttl > e.opts.MaxContractTTL:
		return 0, NewError(CodeInvalidArgument, "a contract lives at most %s", e.opts.MaxContractTTL)
	}
	return ttl, nil
}

// renewedElsewhere reports whether c, which this node holds as expired by
// now, was renewed past now by another node of a cluster: the store's
// record says so, and c takes its expiry. Outside a cluster it is false.
// It is asked only of a contract found expired, so it costs a store read
// once per expiry, not per use.
func (e *Engine) renewedElsewhere(ctx context.Context, c *contract, now time.Time) bool {
	if e.opts.Cluster == nil {
		return false
	}
	rec, err := e.store.GetContract(ctx, c.info.ID)
	if err != nil || rec.Revoked || !now.Before(rec.ExpiresAt) {
		return false
	}
	at := rec.ExpiresAt
	for old := c.exp.Load(); at.After(*old); old = c.exp.Load() {
		if c.exp.CompareAndSwap(old, &at) {
			break
		}
	}
	e.live.add(c.info.Principal, c.info.ID, at, now)
	e.live.extend(c.info.Principal, c.info.ID, at)
	return true
}
