package pigeon

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"pigeon/store"
)

// KV buckets of the access directory.
const (
	bucketAccounts = "accounts"
	bucketRoles    = "roles"
	bucketGrants   = "grants"
	bucketRevoked  = "grants.revoked"
	bucketBroker   = "broker"
)

// Roles the broker itself knows.
const (
	RoleAdmin   = "admin"
	RoleAuditor = "auditor"
)

// Account is a principal the broker keeps: its attributes, its roles and
// the public keys it publishes.
type Account struct {
	ID         string            `json:"id"`
	Attributes map[string]string `json:"attributes,omitempty"`
	Roles      []string          `json:"roles"`
	Keys       []PublicKey       `json:"keys,omitempty"`
	CreatedAt  time.Time         `json:"createdAt"`
}

// Permission grants operations on a subject, optionally only for messages
// whose data matches Selector.
type Permission struct {
	Subject    string      `json:"subject"`
	Operations []Operation `json:"operations"`
	Selector   string      `json:"selector,omitempty"`
}

// Role is a named set of permissions.
type Role struct {
	Name        string       `json:"name"`
	Permissions []Permission `json:"permissions"`
}

// directory holds accounts, roles and grant revocations. Every change bumps
// version; a contract remembers the version it last checked, so the common
// path of an authorization check is one atomic load and one comparison.
type directory struct {
	mu       sync.RWMutex
	accounts map[string]*Account
	roles    map[string]*Role
	grants   map[string]*grantRecord
	revoked  map[string]time.Time
	version  atomic.Uint64
}

func (d *directory) bump() { d.version.Add(1) }

// loadDirectory reads the directory from the store.
func (e *Engine) loadDirectory(ctx context.Context) error {
	d := &e.dir
	d.accounts, d.roles, d.grants, d.revoked = map[string]*Account{}, map[string]*Role{}, map[string]*grantRecord{}, map[string]time.Time{}
	d.version.Store(1)
	load := func(bucket string, fn func(k string, v []byte) error) error {
		kv, err := e.store.List(ctx, bucket)
		if err != nil {
			return storeError(err)
		}
		for k, v := range kv {
			if err := fn(k, v); err != nil {
				return WrapError(CodeStoreCorrupt, err, "%s/%s does not decode", bucket, k)
			}
		}
		return nil
	}
	if err := load(bucketAccounts, func(k string, v []byte) error {
		var a Account
		if err := json.Unmarshal(v, &a); err != nil {
			return err
		}
		d.accounts[a.ID] = &a
		return nil
	}); err != nil {
		return err
	}
	if err := load(bucketRoles, func(k string, v []byte) error {
		var r Role
		if err := json.Unmarshal(v, &r); err != nil {
			return err
		}
		for i, p := range r.Permissions {
			if p.Selector == "" {
				continue
			}
			if _, err := ParseSelector(p.Selector); err != nil {
				e.opts.Logger.Warn("pigeon: a stored role permission has a selector that does not parse; it grants nothing",
					"role", r.Name, "permission", i, "subject", p.Subject, "err", err)
			}
		}
		d.roles[r.Name] = &r
		return nil
	}); err != nil {
		return err
	}
	if err := load(bucketGrants, func(k string, v []byte) error {
		var g grantRecord
		if err := json.Unmarshal(v, &g); err != nil {
			return err
		}
		d.grants[g.JTI] = &g
		return nil
	}); err != nil {
		return err
	}
	return load(bucketRevoked, func(k string, v []byte) error {
		var t time.Time
		if err := json.Unmarshal(v, &t); err != nil {
			return err
		}
		d.revoked[k] = t
		return nil
	})
}

func (e *Engine) putJSON(ctx context.Context, bucket, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return WrapError(CodeInternal, err, "encode %s", bucket)
	}
	return storeError(e.store.Put(ctx, bucket, key, b))
}

func cloneAccount(a *Account) Account {
	c := *a
	c.Attributes = cloneMap(a.Attributes)
	c.Roles = slices.Clone(a.Roles)
	c.Keys = slices.Clone(a.Keys)
	return c
}

// MaxIDLength is the longest account id, role name or grant id accepted.
const MaxIDLength = 256

// validID checks an account id, role name or grant id: 1 to MaxIDLength
// bytes of ASCII letters, digits and '.', '_', '-', ':', '@', '/'. That
// covers SPIFFE ids and e-mail-like names and keeps control characters,
// NUL, whitespace and look-alike Unicode out of audit records and logs.
func validID(kind, s string) error {
	if s == "" || len(s) > MaxIDLength {
		return NewError(CodeInvalidArgument, "%s must be 1 to %d bytes", kind, MaxIDLength)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '_', c == '-', c == ':', c == '@', c == '/':
		default:
			return NewError(CodeInvalidArgument, "%s has a character outside letters, digits and . _ - : @ / (at byte %d)", kind, i)
		}
	}
	return nil
}

// validIDs checks every name of list with validID.
func validIDs(kind string, list []string) error {
	for _, s := range list {
		if err := validID(kind, s); err != nil {
			return err
		}
	}
	return nil
}

// CreateAccount adds an account. It fails with CONFLICT when one with the
// id exists, and with INVALID_ARGUMENT when the id or a role name is not a
// valid id (see MaxIDLength).
func (e *Engine) CreateAccount(ctx context.Context, a Account) (Account, error) {
	if err := e.auditGuard(ctx); err != nil {
		return Account{}, err
	}
	if err := validID("an account id", a.ID); err != nil {
		return Account{}, err
	}
	if err := validIDs("a role name", a.Roles); err != nil {
		return Account{}, err
	}
	d := &e.dir
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.accounts[a.ID]; ok {
		return Account{}, NewError(CodeConflict, "account %s exists", a.ID)
	}
	c := cloneAccount(&a)
	c.Roles = uniqueSorted(c.Roles)
	if c.Roles == nil {
		c.Roles = []string{}
	}
	c.CreatedAt = e.now().UTC()
	if err := e.putJSON(ctx, bucketAccounts, c.ID, &c); err != nil {
		return Account{}, err
	}
	d.accounts[c.ID] = &c
	d.bump()
	e.audit(ctx, store.AuditRecord{Type: "account.created", Principal: c.ID})
	return cloneAccount(&c), nil
}

// GetAccount returns one account (NOT_FOUND otherwise).
func (e *Engine) GetAccount(_ context.Context, id string) (Account, error) {
	d := &e.dir
	d.mu.RLock()
	defer d.mu.RUnlock()
	a, ok := d.accounts[id]
	if !ok {
		return Account{}, NewError(CodeNotFound, "no account %s", id)
	}
	return cloneAccount(a), nil
}

// ListAccounts returns every account, sorted by id.
func (e *Engine) ListAccounts(_ context.Context) []Account {
	d := &e.dir
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make([]Account, 0, len(d.accounts))
	for _, a := range d.accounts {
		out = append(out, cloneAccount(a))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// DeleteAccount removes an account; contracts that relied on its roles
// stop working at their next check.
func (e *Engine) DeleteAccount(ctx context.Context, id string) error {
	d := &e.dir
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.accounts[id]; !ok {
		return NewError(CodeNotFound, "no account %s", id)
	}
	if err := storeError(e.store.Delete(ctx, bucketAccounts, id)); err != nil {
		return err
	}
	delete(d.accounts, id)
	d.bump()
	e.audit(ctx, store.AuditRecord{Type: "account.deleted", Principal: id})
	e.onAccessChanged()
	return nil
}

// updateAccount applies fn to a copy of account id and stores it.
func (e *Engine) updateAccount(ctx context.Context, id string, fn func(a *Account) error) (Account, error) {
	d := &e.dir
	d.mu.Lock()
	defer d.mu.Unlock()
	cur, ok := d.accounts[id]
	if !ok {
		return Account{}, NewError(CodeNotFound, "no account %s", id)
	}
	c := cloneAccount(cur)
	if err := fn(&c); err != nil {
		return Account{}, err
	}
	if err := e.putJSON(ctx, bucketAccounts, id, &c); err != nil {
		return Account{}, err
	}
	d.accounts[id] = &c
	d.bump()
	return cloneAccount(&c), nil
}

// AddAccountRole gives account id the role.
func (e *Engine) AddAccountRole(ctx context.Context, id, role string) (Account, error) {
	if err := e.auditGuard(ctx); err != nil {
		return Account{}, err
	}
	if err := validID("a role name", role); err != nil {
		return Account{}, err
	}
	a, err := e.updateAccount(ctx, id, func(a *Account) error {
		a.Roles = uniqueSorted(append(a.Roles, role))
		return nil
	})
	if err == nil {
		e.audit(ctx, store.AuditRecord{Type: "account.role.added", Principal: id, Ref: role})
	}
	return a, err
}

// RemoveAccountRole takes the role from account id. It takes effect at the
// very next authorization check of every contract and subscription that
// relied on it.
func (e *Engine) RemoveAccountRole(ctx context.Context, id, role string) (Account, error) {
	a, err := e.updateAccount(ctx, id, func(a *Account) error {
		a.Roles = slices.DeleteFunc(a.Roles, func(r string) bool { return r == role })
		return nil
	})
	if err == nil {
		e.audit(ctx, store.AuditRecord{Type: "account.role.removed", Principal: id, Ref: role})
		e.onAccessChanged()
	}
	return a, err
}

// PutRole defines or replaces a role. The name must be a valid id (see
// MaxIDLength), selectors must parse and operations must be known. A
// contract or subscription that relied on a permission the new definition
// drops or narrows fails its next check with GRANT_REVOKED.
func (e *Engine) PutRole(ctx context.Context, r Role) (Role, error) {
	if err := e.auditGuard(ctx); err != nil {
		return Role{}, err
	}
	if err := validID("a role name", r.Name); err != nil {
		return Role{}, err
	}
	for i, p := range r.Permissions {
		if p.Subject == "" {
			return Role{}, NewError(CodeBadRequest, "permissions[%d]: subject is required", i)
		}
		if len(p.Operations) == 0 {
			return Role{}, NewError(CodeBadRequest, "permissions[%d]: operations are required", i)
		}
		for _, op := range p.Operations {
			if !validOperation(string(op)) {
				return Role{}, NewError(CodeBadRequest, "permissions[%d]: unknown operation %q", i, op)
			}
		}
		if p.Selector != "" {
			if _, err := ParseSelector(p.Selector); err != nil {
				return Role{}, err
			}
		}
	}
	c := Role{Name: r.Name, Permissions: slices.Clone(r.Permissions)}
	if c.Permissions == nil {
		c.Permissions = []Permission{}
	}
	d := &e.dir
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := e.putJSON(ctx, bucketRoles, c.Name, &c); err != nil {
		return Role{}, err
	}
	d.roles[c.Name] = &c
	d.bump()
	e.audit(ctx, store.AuditRecord{Type: "role.defined", Ref: c.Name})
	e.onAccessChanged()
	return c, nil
}

// GetRole returns one role.
func (e *Engine) GetRole(_ context.Context, name string) (Role, error) {
	d := &e.dir
	d.mu.RLock()
	defer d.mu.RUnlock()
	r, ok := d.roles[name]
	if !ok {
		return Role{}, NewError(CodeNotFound, "no role %s", name)
	}
	return Role{Name: r.Name, Permissions: slices.Clone(r.Permissions)}, nil
}

// ListRoles returns every role, sorted by name.
func (e *Engine) ListRoles(_ context.Context) []Role {
	d := &e.dir
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make([]Role, 0, len(d.roles))
	for _, r := range d.roles {
		out = append(out, Role{Name: r.Name, Permissions: slices.Clone(r.Permissions)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// DeleteRole removes a role definition. Every contract and subscription
// that relied on one of its permissions fails its next check with
// GRANT_REVOKED, as when the role is taken from the account.
func (e *Engine) DeleteRole(ctx context.Context, name string) error {
	d := &e.dir
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.roles[name]; !ok {
		return NewError(CodeNotFound, "no role %s", name)
	}
	if err := storeError(e.store.Delete(ctx, bucketRoles, name)); err != nil {
		return err
	}
	delete(d.roles, name)
	d.bump()
	e.audit(ctx, store.AuditRecord{Type: "role.deleted", Ref: name})
	e.onAccessChanged()
	return nil
}

// PutAccountKeys replaces the public keys account id publishes. Only the
// account itself or an admin may. Keys that are no longer valid stay listed
// so older signatures still verify; callers rotate by adding a key with a
// later NotBefore and closing the old one's NotAfter.
func (e *Engine) PutAccountKeys(ctx context.Context, by *Principal, id string, keys []PublicKey) (Account, error) {
	if err := e.auditGuard(ctx); err != nil {
		return Account{}, err
	}
	if by == nil || (by.ID != id && !by.HasRole(RoleAdmin)) {
		return Account{}, NewError(CodeForbidden, "only the account itself or an admin may publish its keys")
	}
	if err := ValidateKeys(keys); err != nil {
		return Account{}, WrapError(CodeBadRequest, err, "%v", err)
	}
	a, err := e.updateAccount(ctx, id, func(a *Account) error {
		a.Keys = slices.Clone(keys)
		return nil
	})
	if err == nil {
		e.audit(ctx, store.AuditRecord{Type: "account.keys.published", Principal: id})
	}
	return a, err
}

// AccountKeys returns the public keys account id publishes.
func (e *Engine) AccountKeys(_ context.Context, id string) ([]PublicKey, error) {
	d := &e.dir
	d.mu.RLock()
	defer d.mu.RUnlock()
	a, ok := d.accounts[id]
	if !ok {
		return nil, NewError(CodeNotFound, "no account %s", id)
	}
	return slices.Clone(a.Keys), nil
}

// resolveAccount merges a principal authenticated by a static credential
// with its account, if any: roles are the union, attributes the account's
// overlaid by the credential's.
func (e *Engine) resolveAccount(p *Principal) *Principal {
	d := &e.dir
	d.mu.RLock()
	a, ok := d.accounts[p.ID]
	d.mu.RUnlock()
	out := &Principal{ID: p.ID, Attributes: p.Attributes, Roles: p.Roles, baseRoles: slices.Clone(p.Roles)}
	if !ok {
		return out
	}
	attrs := cloneMap(a.Attributes)
	if attrs == nil && len(p.Attributes) > 0 {
		attrs = map[string]string{}
	}
	for k, v := range p.Attributes {
		attrs[k] = v
	}
	out.Attributes = attrs
	out.Roles = uniqueSorted(append(slices.Clone(p.Roles), a.Roles...))
	return out
}

// effectiveRoles is what p's credential is worth now.
func (e *Engine) effectiveRoles(principal string, baseRoles []string, grantID string, now time.Time) ([]string, Code) {
	d := &e.dir
	d.mu.RLock()
	defer d.mu.RUnlock()
	a := d.accounts[principal]
	if grantID != "" {
		g := d.grants[grantID]
		if _, revoked := d.revoked[grantID]; revoked || g == nil || a == nil || !now.Before(g.ExpiresAt) {
			return nil, CodeGrantRevoked
		}
		return intersect(g.Roles, a.Roles), CodeOK
	}
	roles := slices.Clone(baseRoles)
	if a != nil {
		roles = append(roles, a.Roles...)
	}
	return uniqueSorted(roles), CodeOK
}

// checkAccess re-validates a contract's roles when the directory changed
// since its last check; the common path is one comparison.
func (e *Engine) checkAccess(c *contract) (Code, string) {
	v := e.dir.version.Load()
	if c.accessVer.Load() == v {
		return CodeOK, ""
	}
	now, code := e.effectiveRoles(c.info.Principal, c.info.BaseRoles, c.info.GrantID, e.now())
	if code != CodeOK {
		return code, "the grant behind this contract was revoked or expired"
	}
	for _, r := range c.info.Roles {
		if !slices.Contains(now, r) {
			return CodeGrantRevoked, "a role this contract relied on was removed"
		}
	}
	if !e.rolePermissionsCover(c, now) {
		return CodeGrantRevoked, "a role permission this contract relied on was deleted or narrowed; negotiate again"
	}
	c.accessVer.Store(v)
	return CodeOK, ""
}

// rolePermissionsCover reports whether roles still grant every operation
// that c holds through role permissions, with a scope at least as wide as
// the one c was negotiated with: an operation granted without a selector
// then needs a permission without one, and a scoped operation needs each of
// its selectors among the permissions' now. It fails closed: any narrowing,
// even one that a cleverer comparison of selectors might accept, refuses.
func (e *Engine) rolePermissionsCover(c *contract, roles []string) bool {
	for name, g := range c.grants {
		if g.viaRole == 0 {
			continue
		}
		for _, op := range Operations {
			if g.viaRole&opBit(op) == 0 {
				continue
			}
			scope, ok := e.permissionScope(roles, name, op)
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

// permissionScope returns how the principal's roles grant op on subject:
// ok false when no permission does; scope nil when some permission grants
// it without a selector; otherwise the selectors that scope it. A
// permission whose selector does not parse (only a store written behind
// the broker's back holds one: PutRole refuses it) grants nothing, so it
// can never widen a scope to the whole subject.
func (e *Engine) permissionScope(roles []string, subject string, op Operation) (scope []Selector, ok bool) {
	d := &e.dir
	d.mu.RLock()
	defer d.mu.RUnlock()
	unscoped := false
	for _, name := range roles {
		r := d.roles[name]
		if r == nil {
			continue
		}
		for _, p := range r.Permissions {
			if p.Subject != subject || !slices.Contains(p.Operations, op) {
				continue
			}
			if p.Selector == "" {
				ok, unscoped = true, true
				continue
			}
			sel, err := ParseSelector(p.Selector)
			if err != nil {
				continue
			}
			ok = true
			scope = append(scope, sel)
		}
	}
	if unscoped {
		return nil, ok
	}
	return scope, ok
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

func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return uniqueSorted(out)
}

var errNoGrantKey = errors.New("pigeon: no grant signing key")
