package pigeon

import (
	"errors"
	"maps"
	"slices"
	"sort"
	"strconv"
)

// resolveAccount merges a principal authenticated by a static credential
// with its account, if any: roles are the union, attributes the account's
// overlaid by the credential's.
func (e *Engine) resolveAccount(p *Principal) *Principal {
	a := e.dir.lookup(p.ID)
	out := &Principal{ID: p.ID, Attributes: p.Attributes, Roles: p.Roles, Method: p.Method, Expires: p.Expires,
		baseRoles: slices.Clone(p.Roles), baseAttrs: p.Attributes, resolved: true}
	if out.Method == "" {
		out.Method = AuthToken
	}
	if a == nil {
		return out
	}
	out.Attributes = accountAttributes(a, p.Attributes)
	out.Roles = uniqueSorted(append(slices.Clone(p.Roles), a.Roles...))
	out.account = a.CreatedAt
	return out
}

// resolvePrincipal is resolveAccount, refusing the principal when what
// it would carry, merged with its account, breaks a principal's bounds
// (checkMerged): more than MaxPrincipalRoles roles, its credential's and
// its account's together, or attributes, its account's overlaid by its
// credential's, beyond an account's bounds (validAttributes). Each set
// alone is within them (checkPrincipal; CreateAccount, AddAccountRole),
// but the two together may hold up to twice as many, an account may gain
// its roles or attributes after the credential was made, and an account
// an earlier broker stored may hold more roles than it may now. The
// refusal is UNAUTHENTICATED, as checkPrincipal's, and quotes no value.
func (e *Engine) resolvePrincipal(p *Principal) (*Principal, error) {
	out := e.resolveAccount(p)
	if err := checkMerged(out.Roles, out.Attributes); err != nil {
		return nil, err
	}
	return out, nil
}

// checkMerged holds roles and attrs, what a principal carries once merged
// with its account (its credential's roles and its account's, unique; its
// account's attributes overlaid by its credential's), to the bounds
// checkPrincipal holds a credential's principal to: UNAUTHENTICATED,
// quoting no value, otherwise (see mergedBeyondBounds). Every place that
// merges a principal with its account again checks the merge with it: at
// authentication (resolvePrincipal), when a connection negotiates or
// renews on the principal it authenticated with (currentPrincipal), and
// at a contract's checks (checkAccess, and checkContractAt for the rules'
// principal), where the refusal is GRANT_REVOKED.
func checkMerged(roles []string, attrs map[string]string) error {
	if why := mergedBeyondBounds(roles, attrs); why != "" {
		return NewError(CodeUnauthenticated, "%s", why)
	}
	return nil
}

// mergedBeyondBounds says why roles and attrs, a principal's merged with
// its account, break a principal's bounds (more than MaxPrincipalRoles
// roles; attributes validAttributes refuses), naming no value, or returns
// "" when they are within them.
func mergedBeyondBounds(roles []string, attrs map[string]string) string {
	if len(roles) > MaxPrincipalRoles {
		return "the principal merged with its account carries " + strconv.Itoa(len(roles)) +
			" roles, more than " + strconv.Itoa(MaxPrincipalRoles)
	}
	if len(attrs) == 0 {
		return ""
	}
	if err := validAttributes(attrs); err != nil {
		msg := err.Error()
		if pe := (*Error)(nil); errors.As(err, &pe) {
			msg = pe.Message
		}
		return "the credential's attributes laid over its account's break an account's bounds: " + msg
	}
	return ""
}

// accountAttributes is the attributes of account a (nil: none) overlaid
// by those a credential carries itself (base): a new map, or base itself
// when a has none.
func accountAttributes(a *Account, base map[string]string) map[string]string {
	if a == nil || len(a.Attributes) == 0 {
		return base
	}
	attrs := maps.Clone(a.Attributes)
	for k, v := range base {
		attrs[k] = v
	}
	return attrs
}

// checkAccess re-validates a contract's roles when the directory changed
// since its last check, or is behind; the common path is three atomic
// loads (the version, the last check, behind) and a comparison.
func (e *Engine) checkAccess(c *contract) (Code, string) {
	v := e.dir.version()
	// The last check's result holds while the version is the one it was
	// made at, and the directory is not behind: settle publishes behind
	// before it bumps the version, so in between a check would otherwise
	// pass on a result the version still vouches for. One more atomic
	// load; a check that sees behind goes on to effectiveRoles, which
	// refuses it.
	if st := c.access.Load(); st != nil && st.ver == v && !e.dir.isBehind() {
		return CodeOK, ""
	}
	now, code := e.dir.effectiveRoles(c.info.Principal, c.info.BaseRoles, c.info.GrantID, e.now())
	if code == CodeStoreUnavailable {
		return code, behindText
	}
	if code != CodeOK {
		return code, "the grant behind this contract was revoked or expired"
	}
	acct := c.account(&e.dir) // nil for a contract's account deleted since
	if acct == nil && !c.info.AccountCreatedAt.IsZero() {
		return CodeGrantRevoked, "the account this contract was negotiated for was deleted"
	}
	// The contract's principal merged with its account now, whose rules
	// deniedSince matches, is held to the bounds as at authentication:
	// the account may have gained roles or attributes since. Refused as a
	// deleted account is.
	attrs := accountAttributes(acct, c.info.BaseAttributes)
	if why := mergedBeyondBounds(now, attrs); why != "" {
		return CodeGrantRevoked, beyondBoundsReason(why)
	}
	for _, r := range c.info.Roles {
		if !slices.Contains(now, r) {
			return CodeGrantRevoked, "a role this contract relied on was removed"
		}
	}
	if !e.rolePermissionsCover(c, now) {
		return CodeGrantRevoked, "a role permission this contract relied on was deleted or narrowed; negotiate again"
	}
	if e.deniedSince(c, now, acct, attrs) {
		return CodeGrantRevoked, "a role given, or an account created, since makes a deny rule refuse an operation of this contract; negotiate again"
	}
	c.checkedAt(v, uniqueSorted(now))
	return CodeOK, ""
}

// deniedSince reports whether a catalog deny rule that does not look at
// the message (one negotiation would have applied) refuses an operation c
// holds for what c's principal was given since c was negotiated: a role
// of roles that c was not negotiated with and that the rule names, or,
// when c was negotiated while the principal had no account, the account
// created since, whose attributes any such rule may name. Giving either
// takes access away, as taking a role does. Rules that look at the
// message are applied to each message. The rule is matched as negotiation
// matched it, with the roles now, c's principal and region, and attrs,
// the attributes of acct, c's account (c.account), under those c's
// credential carried itself (c.info.BaseAttributes): checkAccess held
// both to a principal's bounds.
func (e *Engine) deniedSince(c *contract, roles []string, acct *Account, attrs map[string]string) bool {
	var given []string
	for _, r := range roles {
		if !slices.Contains(c.info.Roles, r) {
			given = append(given, r)
		}
	}
	created := c.info.AccountCreatedAt.IsZero() && acct != nil && len(acct.Attributes) > 0
	if len(given) == 0 && !created {
		return false
	}
	q := &Principal{ID: c.info.Principal, Roles: roles, Attributes: attrs}
	cat := e.catalog.Load()
	for name, g := range c.permits {
		s := cat.subjects[name]
		if s == nil {
			continue // gone from the catalog: the contract gate refuses it
		}
		for _, op := range Operations {
			if g.ops&opBit(op) == 0 {
				continue
			}
			for _, r := range s.rules[op] {
				if r.deny && !r.messageDependent() && (created || namesAny(r.roles, given)) && r.matchesIdentity(q, c.info.Region) {
					return true
				}
			}
		}
	}
	return false
}

// namesAny reports whether list holds one of names.
func namesAny(list, names []string) bool {
	return slices.ContainsFunc(list, func(s string) bool { return slices.Contains(names, s) })
}

// denyRuleNames reports whether a catalog deny rule names one of roles:
// giving such a role may take access away.
func (e *Engine) denyRuleNames(roles []string) bool {
	for _, s := range e.catalog.Load().subjects {
		for _, rules := range s.rules {
			for _, r := range rules {
				if r.deny && namesAny(r.roles, roles) {
					return true
				}
			}
		}
	}
	return false
}

// rolePermissionsCover reports whether roles still grant every operation
// that c holds through role permissions, with a scope at least as wide as
// the one c was negotiated with: an operation granted without a selector
// then needs a permission without one, and a scoped operation needs each of
// its selectors among the permissions' now. It fails closed: any narrowing,
// even one that a cleverer comparison of selectors might accept, refuses.
func (e *Engine) rolePermissionsCover(c *contract, roles []string) bool {
	for name, g := range c.permits {
		if g.viaRole == 0 {
			continue
		}
		for _, op := range Operations {
			if g.viaRole&opBit(op) == 0 {
				continue
			}
			scope, ok := e.dir.permissionScope(roles, name, op)
			if !ok {
				return false
			}
			if scope == nil {
				continue // unscoped now: covers any scope
			}
			had := g.scope[opIndex(op)]
			if had == nil {
				return false // was unscoped, is scoped now
			}
			for _, sel := range had {
				if !slices.ContainsFunc(scope, func(s Selector) bool { return s.String() == sel.String() }) {
					return false
				}
			}
		}
	}
	return true
}

// onAccessChanged wakes subscriptions so a removed role stops them at once.
func (e *Engine) onAccessChanged() {
	e.subs.mu.Lock()
	subs := make([]*subscription, 0, len(e.subs.all))
	for s := range e.subs.all {
		subs = append(subs, s)
	}
	e.subs.mu.Unlock()
	for _, s := range subs {
		s.poke()
	}
}

func uniqueSorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return slices.Compact(s)
}

var errNoGrantKey = errors.New("pigeon: no grant signing key")
