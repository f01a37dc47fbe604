package pigeon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"pigeon/store"
)

// Contract is a negotiated session contract: what one principal may do on
// which subjects, compiled from named policy versions, until it expires or
// is revoked. Implementations are immutable and safe for concurrent use.
type Contract interface {
	// ID is the unguessable contract id that every call presents.
	ID() string
	// Principal is the identity the contract was negotiated for.
	Principal() string
	// ExpiresAt is when the contract stops working.
	ExpiresAt() time.Time
	// Allows reports whether the contract grants op on subject.
	Allows(subject string, op Operation) bool
	// Info is the contract in its JSON shape.
	Info() ContractInfo
}

// ContractSubject is one subject granted by a contract.
type ContractSubject struct {
	Name       string      `json:"name"`
	SubjectID  string      `json:"subjectId"`
	SchemaID   string      `json:"schemaId"`
	PolicyID   string      `json:"policyId"`
	Operations []Operation `json:"operations"`
	// Digest identifies the exact compiled policy (and schema) version.
	Digest string `json:"digest,omitempty"`
	// Scope lists, per operation granted only through role permissions
	// with selectors, the selectors a message must match (any of them).
	Scope map[Operation][]string `json:"scope,omitempty"`
	// ViaRole lists the operations granted through role permissions.
	ViaRole []Operation `json:"viaRole,omitempty"`
}

// ContractInfo is a contract's JSON shape.
type ContractInfo struct {
	ID        string            `json:"id"`
	Principal string            `json:"principal"`
	Subjects  []ContractSubject `json:"subjects"`
	PolicyIDs []string          `json:"policyIds"`
	IssuedAt  time.Time         `json:"issuedAt"`
	ExpiresAt time.Time         `json:"expiresAt"`
	Region    string            `json:"region,omitempty"`
	// Roles are the principal's roles when the contract was negotiated;
	// removing any of them, or deleting or narrowing a role permission an
	// operation was granted through, fails the contract's next check with
	// GRANT_REVOKED. BaseRoles came with the credential itself; GrantID
	// names the grant token it was negotiated with.
	Roles     []string `json:"roles,omitempty"`
	BaseRoles []string `json:"baseRoles,omitempty"`
	GrantID   string   `json:"grantId,omitempty"`
	// BaseAttributes came with the credential itself, as BaseRoles did:
	// only a credential that carries each of them holds the contract.
	BaseAttributes map[string]string `json:"baseAttributes,omitempty"`
	// AccountCreatedAt is when the principal's account, whose roles and
	// attributes the contract was negotiated with, was created; zero when
	// the principal had no account then. Once that account is deleted
	// (and whether or not one is created again under its id), the
	// contract fails its next check with GRANT_REVOKED.
	AccountCreatedAt time.Time `json:"accountCreatedAt,omitzero"`
	// Auth is how the principal proved its identity when the contract was
	// negotiated (mtls, oidc, grant, token); empty for a contract stored
	// before it was recorded.
	Auth AuthMethod `json:"auth,omitempty"`
}

// UnmarshalJSON reads a contract, its issuedAt, expiresAt and
// accountCreatedAt as every Pigeon reader reads a time (RFC 3339 proper,
// the broker's syntax), as the other clients read a contract: a time
// encoding/json alone takes (an offset of 24 hours, a comma before the
// fraction, a one-digit hour) would have the Go client renew on another
// schedule than the others, from an expiry they refuse.
func (c *ContractInfo) UnmarshalJSON(b []byte) error {
	type plain ContractInfo
	var v struct {
		*plain
		IssuedAt         json.RawMessage `json:"issuedAt"`
		ExpiresAt        json.RawMessage `json:"expiresAt"`
		AccountCreatedAt json.RawMessage `json:"accountCreatedAt"`
	}
	var out ContractInfo
	v.plain = (*plain)(&out)
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	for _, m := range [...]struct {
		name string
		raw  json.RawMessage
		to   *time.Time
	}{{"contract issuedAt", v.IssuedAt, &out.IssuedAt}, {"contract expiresAt", v.ExpiresAt, &out.ExpiresAt}, {"contract accountCreatedAt", v.AccountCreatedAt, &out.AccountCreatedAt}} {
		if err := timeMember(m.name, m.raw, m.to); err != nil {
			return err
		}
	}
	*c = out
	return nil
}

// View returns a Contract backed by a copy of the info, for clients that
// received a contract over the wire; the engine reads stored contracts
// through it too. It fails closed: an operation listed in a subject's
// Scope is scoped even when its list is empty or none of its selectors
// parses, and then matches no message, and a selector that does not parse
// is left out, which narrows the scope. Scope entries that name no
// operation are ignored.
func (ci ContractInfo) View() Contract {
	c := &contract{info: ci, permits: map[string]*permit{}}
	c.setExpiry(ci.ExpiresAt)
	for _, s := range ci.Subjects {
		g := &permit{digest: s.Digest}
		for _, op := range s.Operations {
			g.ops |= opBit(op)
		}
		for _, op := range s.ViaRole {
			g.viaRole |= opBit(op)
		}
		for op, sels := range s.Scope {
			if op.Index() < 0 {
				continue // not an operation: granted nothing, scopes nothing
			}
			g.restrict(op)
			for _, txt := range sels {
				if sel, err := ParseSelector(txt); err == nil {
					g.setScope(op, sel)
				}
			}
		}
		c.permits[s.Name] = g
	}
	return c
}

type contract struct {
	info    ContractInfo // its ExpiresAt is the expiry when it was negotiated or loaded; exp is the one in force
	permits map[string]*permit
	revoked atomic.Bool
	// revokeStored is set once the store holds the contract revoked
	// (storeRevocation, or revoked when loaded or by another node);
	// revokeMu orders the calls that store it.
	revokeStored atomic.Bool
	revokeMu     sync.Mutex
	access       atomic.Pointer[accessState] // the last access check; nil: none yet
	exp          atomic.Pointer[time.Time]   // when it expires; RenewContract moves it later
	// saveMu orders the writes of the contract's record (saveContract),
	// each of which reads revoked while it holds it: a renewal that read
	// the contract before a revocation cannot store it unrevoked after the
	// revocation's write.
	saveMu sync.Mutex
	// ruleBoundsHeld, when set (by a test), runs once ruleBounds found
	// what the rules would see p carry, merged again with c's account,
	// within the bounds, and returned: the instant before rulePrincipal
	// merges it again, when a change of the directory may move it past
	// them. Only a merge again reaches it, never an operation's common
	// path.
	ruleBoundsHeld func()
}

// accessState is what a contract's last access check found: the
// directory version it checked at and the roles in effect then, which the
// rules applied to each message match (see rulePrincipal).
type accessState struct {
	ver   uint64
	roles []string // sorted, unique
}

// checkedAt records that c's access was checked at directory version ver,
// with roles in effect. A check that read an older version than the one
// recorded does not replace it: the roles stay those of the newest.
func (c *contract) checkedAt(ver uint64, roles []string) {
	next := &accessState{ver: ver, roles: roles}
	for {
		cur := c.access.Load()
		if cur != nil && cur.ver >= ver {
			return
		}
		if c.access.CompareAndSwap(cur, next) {
			return
		}
	}
}

// rulePrincipal is p, the caller acting under c, as the rules applied to
// each message must see it: with the roles c holds now (as its last
// access check found them), not those p authenticated with, and with the
// attributes of c's account (see account) under those p's credential
// carries. A connection authenticates once and may publish for
// hours, and negotiate again on that principal; the roles its account was
// given or lost since, and the attributes of an account deleted or
// created again under its id since, are the contract's. p itself when
// they are the same; a copy otherwise. The account is looked up only when
// p was merged with another account than c's.
//
// The roles are those a check held to a principal's bounds (checkAccess,
// or currentPrincipal at negotiation), and p's own attributes were held
// to them at authentication. Attributes merged again with c's account
// (ruleAttributes) are held to them here, as checkContractAt, which every
// caller runs for p and c just before, held them (ruleBounds): the
// account is read again, and may have been created, with attributes of
// its own, in between. It returns no principal and why then, the reason
// the caller refuses the operation with, GRANT_REVOKED, as
// checkContractAt does (see beyondBoundsReason); "" otherwise. A
// principal not merged again is neither looked up nor checked.
func (c *contract) rulePrincipal(d *directory, p *Principal) (*Principal, string) {
	roles := c.info.Roles
	if st := c.access.Load(); st != nil {
		roles = st.roles
	}
	attrs, stale := c.ruleAttributes(d, p)
	if stale {
		if why := mergedBeyondBounds(nil, attrs); why != "" {
			return nil, beyondBoundsReason(why)
		}
	}
	if sameSet(roles, p.Roles) && (!stale || maps.Equal(attrs, p.Attributes)) {
		return p, ""
	}
	q := *p
	q.Roles, q.Attributes = roles, attrs
	return &q, ""
}

// ruleAttributes is the attributes the rules see p, acting under c, carry
// (see rulePrincipal), and whether they were merged again (stale): p's
// own when p was merged with c's account, or was built by hand; those of
// c's account now under those p's credential carries otherwise, which
// may break the bounds p's own were held to (see ruleBounds).
func (c *contract) ruleAttributes(d *directory, p *Principal) (attrs map[string]string, stale bool) {
	if !p.resolved || p.account.Equal(c.info.AccountCreatedAt) {
		return p.Attributes, false
	}
	return accountAttributes(c.account(d), p.baseAttrs), true
}

// ruleBounds says why the attributes the rules would see p carry under c
// (ruleAttributes), merged again with c's account, break a principal's
// bounds (mergedBeyondBounds), or returns "": a credential of the
// account, authenticated before the account was created again with
// attributes of its own, may act under a contract another credential of
// it negotiated since, and would then carry both sets of attributes.
// Only such a merge is checked, once per operation: p's own attributes
// were checked at authentication, and the roles are the contract's,
// checked by checkAccess. The caller that goes on to apply the rules
// merges again, and checks again (rulePrincipal).
func (c *contract) ruleBounds(d *directory, p *Principal) string {
	attrs, stale := c.ruleAttributes(d, p)
	if !stale {
		return ""
	}
	if why := mergedBeyondBounds(nil, attrs); why != "" {
		return why
	}
	if c.ruleBoundsHeld != nil {
		c.ruleBoundsHeld()
	}
	return ""
}

// beyondBoundsReason is the reason a contract's operation is refused
// (GRANT_REVOKED) when the principal acting under it, merged with its
// account now, breaks a principal's bounds for why (mergedBeyondBounds):
// by checkAccess, checkContractAt and the callers of rulePrincipal alike.
func beyondBoundsReason(why string) string { return why + "; authenticate and negotiate again" }

// account returns c's account: the one created at AccountCreatedAt (nil
// when it was deleted since) or, for a contract negotiated without an
// account, the principal's account now, whose roles checkAccess counts
// too (nil when there is none).
func (c *contract) account(d *directory) *Account {
	a := d.lookup(c.info.Principal)
	if a != nil && !c.info.AccountCreatedAt.IsZero() && !a.CreatedAt.Equal(c.info.AccountCreatedAt) {
		return nil
	}
	return a
}

// sameSet reports whether b holds exactly the strings of a, which are
// unique, in any order: b is as long as a and holds each of them.
func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, s := range a {
		if !slices.Contains(b, s) {
			return false
		}
	}
	return true
}

// expiresAt is when c expires, as renewals moved it.
func (c *contract) expiresAt() time.Time { return *c.exp.Load() }

// setExpiry sets when c expires.
func (c *contract) setExpiry(t time.Time) { c.exp.Store(&t) }

func (c *contract) ID() string           { return c.info.ID }
func (c *contract) Principal() string    { return c.info.Principal }
func (c *contract) ExpiresAt() time.Time { return c.expiresAt() }
func (c *contract) Info() ContractInfo {
	ci := c.info
	ci.ExpiresAt = c.expiresAt()
	ci.Subjects = slices.Clone(ci.Subjects)
	ci.PolicyIDs = slices.Clone(ci.PolicyIDs)
	ci.BaseAttributes = maps.Clone(ci.BaseAttributes)
	return ci
}
func (c *contract) Allows(subject string, op Operation) bool {
	g, ok := c.permits[subject]
	return ok && g.ops&opBit(op) != 0
}

// MarshalJSON renders the contract's JSON shape.
func (c *contract) MarshalJSON() ([]byte, error) { return json.Marshal(c.Info()) }

// contracts is the engine's table of live contracts.
type contracts struct {
	mu sync.RWMutex
	m  map[string]*contract
	// revokedAway holds, for a while, contracts another node revoked while
	// this one had not loaded them: a load that read the store just before
	// the revocation must not cache the contract live (a cluster only).
	revokedAway map[string]time.Time
}

// revokedAwayKeep is how long a revocation by another node of a contract
// this node had not loaded is remembered: far longer than a store read.
const revokedAwayKeep = time.Minute

// noteRevokedAway remembers that another node revoked contract id, which
// this node has not loaded. The caller holds mu.
func (cs *contracts) noteRevokedAway(id string, now time.Time) {
	if cs.revokedAway == nil {
		cs.revokedAway = map[string]time.Time{}
	}
	for k, at := range cs.revokedAway {
		if now.Sub(at) > revokedAwayKeep {
			delete(cs.revokedAway, k)
		}
	}
	cs.revokedAway[id] = now
}

func newContractID() string {
	var b [18]byte
	_, _ = rand.Read(b[:])
	return "ctr_" + hex.EncodeToString(b[:])
}

// maxTTLMillis is the largest ttlMs whose time.Duration does not overflow.
const maxTTLMillis = int64(math.MaxInt64 / int64(time.Millisecond))

// TTLFromMillis converts a ttlMs read from the wire (HTTP, WebSocket) into a
// time.Duration. 0 stays 0, which asks for the default. A negative value, or
// one so large that the multiplication by time.Millisecond would overflow
// (and wrap around to a default or to a lifetime of under a second), is an
// *Error with CodeInvalidArgument. It does not apply a maximum: Negotiate
// and IssueGrant refuse lifetimes above theirs (Options.MaxContractTTL,
// MaxGrantTTL) with the same code.
func TTLFromMillis(ms int64) (time.Duration, error) { return MillisField("ttlMs", ms) }

// MillisField converts a wire field of milliseconds named name (ttlMs,
// delayMs, timeoutMs) to a Duration, refusing with INVALID_ARGUMENT a
// negative value or one whose Duration would overflow, instead of letting
// it wrap around.
func MillisField(name string, ms int64) (time.Duration, error) {
	if ms < 0 {
		return 0, NewError(CodeInvalidArgument, "%s must not be negative (got %d)", name, ms)
	}
	if ms > maxTTLMillis {
		return 0, NewError(CodeInvalidArgument, "%s %d is out of range", name, ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// currentPrincipal is p as its credential stands at now, which a contract
// is negotiated for: the roles its credential carries and its account
// holds now (the directory's effectiveRoles, as checkAccess computes them
// for a contract), and the attributes of its account now under those its
// credential carries, not those of when it authenticated. p may have
// authenticated long before: a WebSocket connection negotiates again on
// the principal of its upgrade. A grant revoked since is GRANT_REVOKED
// (negotiate refuses one expired since UNAUTHENTICATED before, as it does
// every expired credential: Principal.Expires). A principal the engine did
// not resolve (built by an embedder) carries its Roles and Attributes,
// and no account: its contracts do not end with an account. The returned
// principal is p when nothing changed, a copy otherwise (Expires kept); it
// is never nil.
//
// What it merges is held to a principal's bounds as authentication holds
// them (checkMerged): at most MaxPrincipalRoles roles (its credential's
// and its account's, or a grant's its account still holds) and
// attributes within an account's bounds. An account may have gained roles
// or attributes since p authenticated, and a grant's record may have been
// rewritten in the store; the principal is then refused UNAUTHENTICATED,
// as authenticating its credential again would be, and the caller
// (negotiate, RenewContract, MayPublishAtDepth) acts on nothing.
func (e *Engine) currentPrincipal(p *Principal, now time.Time) (*Principal, error) {
	base := p.baseRoles
	if !p.resolved {
		base = p.Roles
	}
	roles, code := e.dir.effectiveRoles(p.ID, base, p.grantID, now)
	if code == CodeStoreUnavailable {
		return p, errBehind()
	}
	if code != CodeOK {
		return p, NewError(code, "the grant this principal authenticated with was revoked or has expired; authenticate again")
	}
	// The account's attributes, and which account it is, are read only
	// for a principal the engine merged with its account: one built by an
	// embedder (a program's binding, say) carries its own.
	attrs := p.Attributes
	var created time.Time
	if p.resolved {
		// An account deleted, or deleted and created again, since p
		// authenticated has other attributes (or none) than p carries.
		a := e.dir.lookup(p.ID)
		attrs = accountAttributes(a, p.baseAttrs)
		if a != nil {
			created = a.CreatedAt
		}
	}
	if p.resolved && slices.Equal(roles, p.Roles) && p.account.Equal(created) && maps.Equal(attrs, p.Attributes) {
		return p, nil // as authentication held it to the bounds
	}
	if err := checkMerged(roles, attrs); err != nil {
		return p, err
	}
	q := *p
	q.Roles, q.baseRoles, q.Attributes, q.account, q.resolved = roles, base, attrs, created, true
	if !p.resolved {
		q.baseAttrs = p.Attributes
	}
	return &q, nil
}

// negotiate intersects the requested subjects with policy at identity
// level and issues a contract. The contract expires after ttl, or when the
// principal's credential does (Principal.Expires, a grant's expiry) if that
// comes first; a principal whose credential has expired is refused
// UNAUTHENTICATED.
func (e *Engine) negotiate(ctx context.Context, p *Principal, region string, names []string, ttl time.Duration) (*contract, error) {
	if len(names) == 0 {
		return nil, NewError(CodeBadRequest, "negotiation needs at least one subject")
	}
	ttl, err := e.contractTTL(ttl)
	if err != nil {
		return nil, err
	}
	now := e.now()
	if p.expiredAt(now) {
		// A connection authenticated once (a WebSocket session) outlives
		// its credential: it may not negotiate on it.
		e.audit(ctx, EventContractDenied.record(OutcomeDeny, CodeUnauthenticated, store.AuditRecord{Principal: p.ID, Ref: authRef(p.Method)}))
		return nil, NewError(CodeUnauthenticated, "the credential has expired (at %s); reconnect with a fresh one",
			p.Expires.UTC().Format(time.RFC3339))
	}
	if err := CheckRegion(region); err != nil {
		e.audit(ctx, EventContractDenied.record(OutcomeDeny, ErrorCode(err), store.AuditRecord{Principal: p.ID}))
		return nil, err
	}
	if e.dir.isBehind() {
		// Refused before the rate is taken from: a client retrying while
		// this node cannot be sure of its directory keeps its burst for
		// when it can (currentPrincipal would refuse it all the same).
		e.audit(ctx, EventContractDenied.record(OutcomeDeny, CodeStoreUnavailable, store.AuditRecord{Principal: p.ID}))
		return nil, errBehind()
	}
	if rp := e.opts.NegotiateRate; rp.PerSecond > 0 && !e.limiter.take(rateKey{kind: limitNegotiate, principal: p.ID}, rp, now) {
		e.audit(ctx, EventContractDenied.record(OutcomeDeny, CodeRateLimited, store.AuditRecord{Principal: p.ID}))
		return nil, NewError(CodeRateLimited, "negotiation rate limit exceeded for this principal")
	}
	// The version is read before the roles are: a change of the directory
	// in between makes the contract's first check recompute them, rather
	// than marking roles read before a removal as current after it.
	ver := e.dir.version()
	p, err = e.currentPrincipal(p, now)
	if err != nil {
		e.audit(ctx, EventContractDenied.record(OutcomeDeny, ErrorCode(err), store.AuditRecord{Principal: p.ID}))
		return nil, err
	}
	cat := e.catalog.Load()
	c := &contract{permits: map[string]*permit{}}
	c.info = ContractInfo{ID: newContractID(), Principal: p.ID, Region: region, IssuedAt: now, ExpiresAt: now.Add(ttl),
		Roles: uniqueSorted(p.Roles), BaseRoles: uniqueSorted(p.baseRoles), GrantID: p.grantID, Auth: p.Method,
		BaseAttributes: maps.Clone(p.baseAttrs), AccountCreatedAt: p.account}
	// The contract lives no longer than the credential behind it.
	if p.grantID != "" {
		if at, ok := e.dir.grantExpiry(p.grantID); ok && at.Before(c.info.ExpiresAt) {
			c.info.ExpiresAt = at
		}
	}
	if !p.Expires.IsZero() && p.Expires.Before(c.info.ExpiresAt) {
		c.info.ExpiresAt = p.Expires
	}
	c.setExpiry(c.info.ExpiresAt)
	c.checkedAt(ver, c.info.Roles)
	seen := map[string]bool{}
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		s := cat.subjects[name]
		if s == nil {
			e.audit(ctx, EventContractDenied.record(OutcomeDeny, CodeSubjectNotFound, store.AuditRecord{Subject: name, Principal: p.ID}))
			return nil, NewError(CodeSubjectNotFound, "unknown subject %q", name)
		}
		g := &permit{digest: s.digest}
		cs := ContractSubject{Name: name, SubjectID: s.name, SchemaID: s.schemaID, PolicyID: s.policyID, Digest: s.digest}
		for _, op := range Operations {
			allowed, denied := s.identityVerdict(op, p, region)
			switch {
			case allowed:
			case denied:
				continue
			default:
				scope, ok := e.dir.permissionScope(p.Roles, name, op)
				if !ok {
					continue
				}
				g.viaRole |= opBit(op)
				cs.ViaRole = append(cs.ViaRole, op)
				for _, sel := range scope {
					g.setScope(op, sel)
					if cs.Scope == nil {
						cs.Scope = map[Operation][]string{}
					}
					cs.Scope[op] = append(cs.Scope[op], sel.String())
				}
			}
			g.ops |= opBit(op)
			cs.Operations = append(cs.Operations, op)
		}
		if g.ops == 0 {
			continue
		}
		g.subj.Store(s)
		c.permits[name] = g
		c.info.Subjects = append(c.info.Subjects, cs)
		c.info.PolicyIDs = append(c.info.PolicyIDs, s.policyID)
	}
	if len(c.permits) == 0 {
		e.audit(ctx, EventContractDenied.record(OutcomeDeny, CodeNoPermittedSubjects, store.AuditRecord{Principal: p.ID}))
		return nil, NewError(CodeNoPermittedSubjects, "no requested subject is permitted to this principal")
	}
	if !e.live.reserve(p.ID, c.info.ID, c.info.ExpiresAt, now, e.opts.MaxContractsPerPrincipal) {
		e.audit(ctx, EventContractDenied.record(OutcomeDeny, CodeTooManyContracts, store.AuditRecord{Principal: p.ID}))
		return nil, NewError(CodeTooManyContracts, "this principal holds %d live contracts, the most allowed; revoke one or wait for one to expire", e.opts.MaxContractsPerPrincipal)
	}
	if err := e.saveContract(ctx, c); err != nil {
		e.live.release(p.ID, c.info.ID)
		return nil, err
	}
	for _, s := range c.info.Subjects {
		if err := e.audit(ctx, EventContractNegotiated.record(OutcomeAllow, CodeOK, store.AuditRecord{Subject: s.Name, Principal: p.ID, ContractID: c.info.ID, PolicyID: s.PolicyID, SchemaID: s.SchemaID, Ref: authRef(p.Method)})); err != nil {
			// No contract without its evidence: it is revoked before anyone
			// holds it.
			c.revoked.Store(true)
			_ = e.saveContract(ctx, c)
			e.live.release(p.ID, c.info.ID)
			return nil, err
		}
	}
	e.contracts.mu.Lock()
	e.contracts.m[c.info.ID] = c
	e.contracts.mu.Unlock()
	return c, nil
}

// saveContract stores c as it is now. Writes of one contract are taken one
// at a time, each reading c's state when its turn comes, so the last write
// is never older than a revocation: RevokeContract sets revoked before it
// saves, and a renewal's write that waited for it stores the contract
// revoked.
func (e *Engine) saveContract(ctx context.Context, c *contract) error {
	c.saveMu.Lock()
	defer c.saveMu.Unlock()
	info := c.Info()
	body, err := json.Marshal(info)
	if err != nil {
		return WrapError(CodeInternal, err, "encode contract")
	}
	rec := store.ContractRecord{ID: info.ID, Principal: info.Principal, Region: info.Region,
		IssuedAt: info.IssuedAt, ExpiresAt: info.ExpiresAt, Revoked: c.revoked.Load(), Body: body}
	if err := e.store.PutContract(ctx, rec); err != nil {
		return storeError(err)
	}
	return nil
}

// lookupContract finds a live contract, loading it from the store when this
// process has not seen it (after a restart).
func (e *Engine) lookupContract(ctx context.Context, id string) (*contract, error) {
	e.contracts.mu.RLock()
	c := e.contracts.m[id]
	e.contracts.mu.RUnlock()
	if c != nil {
		return c, nil
	}
	rec, err := e.store.GetContract(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, storeError(err)
	}
	var info ContractInfo
	if err := json.Unmarshal(rec.Body, &info); err != nil {
		return nil, WrapError(CodeInternal, err, "decode contract")
	}
	c = info.View().(*contract)
	e.contracts.mu.Lock()
	if _, away := e.contracts.revokedAway[id]; away {
		rec.Revoked = true // revoked by another node while this one read it
	}
	c.revoked.Store(rec.Revoked)
	c.revokeStored.Store(rec.Revoked)
	if prev := e.contracts.m[id]; prev != nil {
		c = prev
	} else {
		e.contracts.m[id] = c
		if !rec.Revoked {
			e.live.add(c.info.Principal, id, c.expiresAt(), e.now())
		}
	}
	e.contracts.mu.Unlock()
	return c, nil
}

// mismatchReason is why a contract is refused to a caller that does not
// hold it.
const mismatchReason = "the contract belongs to another principal or credential"

// heldBy reports whether p holds c: p is c's principal, and p's credential
// is at least the one c was negotiated with. A contract negotiated with a
// grant token is held by that grant only; one negotiated otherwise by a
// credential that is no grant and carries every role and attribute c's
// credential carried (c.info.BaseRoles, c.info.BaseAttributes). So a
// narrower credential of the same account (a grant handing a program one
// role, a token without a role or an attribute) cannot act under a wider
// credential's contract, whose id is no secret: it travels in every
// delivery. The roles the account holds are checkAccess's.
func (c *contract) heldBy(p *Principal) bool {
	if c.info.Principal != p.ID || c.info.GrantID != p.grantID {
		return false
	}
	base, attrs := p.baseRoles, p.baseAttrs
	if !p.resolved {
		base, attrs = p.Roles, p.Attributes
	}
	for _, r := range c.info.BaseRoles {
		if !slices.Contains(base, r) {
			return false
		}
	}
	for k, v := range c.info.BaseAttributes {
		if got, ok := attrs[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// checkContract validates a contract for op on subj by p, now. It fails
// closed.
func (e *Engine) checkContract(ctx context.Context, id string, p *Principal, subj *subject, op Operation) (*contract, Code, string) {
	return e.checkContractAt(ctx, id, p, subj, op, e.now())
}

// checkContractAt is checkContract at time now: a publish checks expiry at
// its admission time rather than reading the clock again.
func (e *Engine) checkContractAt(ctx context.Context, id string, p *Principal, subj *subject, op Operation, now time.Time) (*contract, Code, string) {
	if id == "" {
		return nil, CodeContractRequired, "a contract is required"
	}
	c, err := e.lookupContract(ctx, id)
	if err != nil {
		return nil, ErrorCode(err), "contract lookup failed"
	}
	if c == nil {
		return nil, CodeContractNotFound, "unknown contract"
	}
	if !c.heldBy(p) {
		return nil, CodeContractPrincipalMismatch, mismatchReason
	}
	if c.revoked.Load() {
		return nil, CodeContractRevoked, "the contract was revoked"
	}
	if e.contractInDoubt(id) {
		return nil, CodeStoreUnavailable, doubtText
	}
	if !now.Before(c.expiresAt()) && !e.renewedElsewhere(ctx, c, now) {
		return nil, CodeContractExpired, "the contract has expired"
	}
	if code, reason := e.checkAccess(c); code != CodeOK {
		return nil, code, reason
	}
	if why := c.ruleBounds(&e.dir, p); why != "" {
		// Refused as checkAccess refuses a contract whose principal,
		// merged with its account now, breaks the bounds.
		return nil, CodeGrantRevoked, beyondBoundsReason(why)
	}
	if subj == nil {
		return nil, CodeSubjectNotFound, "unknown subject"
	}
	g := c.permits[subj.name]
	if g == nil {
		return nil, CodeSubjectNotInContract, "the subject is not in the contract"
	}
	if g.subj.Load() != subj {
		if g.digest != subj.digest {
			return nil, CodeContractStale, "the subject's policy changed; negotiate again"
		}
		g.subj.Store(subj)
	}
	if g.ops&opBit(op) == 0 {
		return nil, CodeOperationNotInContract, "the contract does not grant " + string(op)
	}
	return c, CodeOK, ""
}

// contractError returns the typed error for a failed contract check on a
// non-publish operation, with an audit record.
func (e *Engine) contractError(ctx context.Context, typ Event, p *Principal, subject, contractID string, code Code, reason string) error {
	e.audit(ctx, typ.record(OutcomeDeny, code, store.AuditRecord{Gate: GateContract, Subject: subject, Principal: p.ID, ContractID: contractID}))
	return NewError(code, "%s", reason)
}

// GetContract returns a contract to its holder.
func (e *Engine) GetContract(ctx context.Context, p *Principal, id string) (Contract, error) {
	c, err := e.lookupContract(ctx, id)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, NewError(CodeContractNotFound, "unknown contract")
	}
	if !c.heldBy(p) {
		return nil, NewError(CodeContractPrincipalMismatch, mismatchReason)
	}
	return c, nil
}

// sweepContracts drops expired contracts from memory and the store.
func (e *Engine) sweepContracts(ctx context.Context) {
	// Expired contracts stay an hour so that late callers learn
	// CONTRACT_EXPIRED rather than CONTRACT_NOT_FOUND.
	cut := e.now().Add(-time.Hour)
	e.contracts.mu.Lock()
	for id, c := range e.contracts.m {
		if c.expiresAt().Before(cut) {
			delete(e.contracts.m, id)
		}
	}
	e.contracts.mu.Unlock()
	e.live.sweep(e.now())
	_, _ = e.store.DeleteExpiredContracts(ctx, cut)
}

// authRef is the ref of a contract.negotiated record: how the principal
// was authenticated.
func authRef(m AuthMethod) string {
	if m == "" {
		return ""
	}
	return "auth:" + string(m)
}
