package pigeon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"pigeon/store"
)

// Roles the broker itself knows. The Engine methods that manage accounts,
// roles, grants and keys, and those that read the audit log and the
// quarantine, do not check them: they trust their caller, as an embedding
// application is trusted. The server's route table is where a remote
// caller's role is checked.
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

// MaxRolePermissions is the most permissions a role holds. Every node
// keeps every role, and an authorization check reads the permissions of
// each of its principal's roles (up to MaxPrincipalRoles of them), so
// PutRole refuses a longer list (INVALID_ARGUMENT) before anything is
// written. A role stored with more (an earlier broker, a store written
// behind the broker's back) loads with its first MaxRolePermissions: the
// rest grant nothing (see load).
const MaxRolePermissions = 1024

// MaxPermissionOperations is the most operations a permission lists: as
// many as there are operations (Operations), so a longer list names one
// twice. PutRole refuses a permission listing more (INVALID_ARGUMENT),
// and load skips one stored with more, as any permission PutRole refuses.
const MaxPermissionOperations = 4

// MaxIDLength is the longest account id, role name or grant id accepted.
const MaxIDLength = 256

// validID checks an account id, role name or grant id: 1 to MaxIDLength
// bytes of ASCII letters, digits and '.', '_', '-', ':', '@', '/'. That
// covers SPIFFE ids and e-mail-like names and keeps control characters,
// NUL, whitespace and look-alike Unicode out of audit records and logs.
// No '/'-separated segment may be "." or "..": a server cleans those out
// of a URL path, so such an account could never be named in one.
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
	for seg := range strings.SplitSeq(s, "/") {
		if seg == "." || seg == ".." {
			return NewError(CodeInvalidArgument, "%s has a path segment %q: it could not be named in a URL path", kind, seg)
		}
	}
	return nil
}

// validText checks a free-text name or value the directory keeps and
// shows (an account attribute's name or value): UTF-8 without a control
// character (C0, tab and newline included, DEL, C1), so that no listing,
// console or terminal that prints it raw can be driven by ESC, CSI or CR
// through it. kind names the field in the refusal.
func validText(kind, s string) error {
	switch {
	case !utf8.ValidString(s):
		return NewError(CodeInvalidArgument, "%s is not valid UTF-8", kind)
	case hasControl(s):
		return NewError(CodeInvalidArgument, "%s holds a control or formatting character", kind)
	}
	return nil
}

// MaxAccountAttributes is the most attributes an account holds. The
// directory keeps them, copies them into every principal of the account,
// and listings, the console and policy conditions read them.
const MaxAccountAttributes = 64

// MaxAttributeNameLength is the longest account attribute name accepted,
// in bytes: that of an id (MaxIDLength).
const MaxAttributeNameLength = MaxIDLength

// MaxAttributeValueLength is the longest account attribute value
// accepted, in bytes.
const MaxAttributeValueLength = 1024

// validAttributes checks an account's attributes: at most
// MaxAccountAttributes of them, every name 1 to MaxAttributeNameLength
// bytes and every value at most MaxAttributeValueLength bytes, both
// checked with validText.
func validAttributes(attrs map[string]string) error {
	if len(attrs) > MaxAccountAttributes {
		return NewError(CodeInvalidArgument, "an account has %d attributes, more than %d", len(attrs), MaxAccountAttributes)
	}
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		if k == "" {
			return NewError(CodeInvalidArgument, "an attribute name is empty")
		}
		if len(k) > MaxAttributeNameLength {
			// The name is not quoted: it is the long thing refused.
			return NewError(CodeInvalidArgument, "an attribute name is %d bytes, more than %d", len(k), MaxAttributeNameLength)
		}
		if len(attrs[k]) > MaxAttributeValueLength {
			return NewError(CodeInvalidArgument, "the value of attribute %s is %d bytes, more than %d", strconv.Quote(k), len(attrs[k]), MaxAttributeValueLength)
		}
		if err := validText("the attribute name "+strconv.Quote(k), k); err != nil {
			return err
		}
		if err := validText("the value of attribute "+strconv.Quote(k), attrs[k]); err != nil {
			return err
		}
	}
	return nil
}

// checkAccountRoles holds roles, an account's roles (unique), to the most
// an account holds: MaxPrincipalRoles, the most a principal carries, since
// every principal of the account carries them all (resolveAccount), and
// one that carries more is refused at authentication (checkMerged).
// INVALID_ARGUMENT otherwise: CreateAccount and AddAccountRole refuse the
// write. An account an earlier broker stored with more still loads, and
// is neither refused nor skipped: its roles may take access away (a
// catalog deny rule may name one), so skipping it could lift a deny, and
// refusing to start would stop an upgrade. Its principals fail closed
// instead: every authentication merged with it is refused
// UNAUTHENTICATED (resolvePrincipal), and every contract checked against
// it GRANT_REVOKED (checkAccess). A grant of it (IssueGrant) carries only
// the grant's roles the account holds, at most MaxPrincipalRoles.
func checkAccountRoles(roles []string) error {
	if len(roles) > MaxPrincipalRoles {
		return NewError(CodeInvalidArgument, "an account holds at most %d roles, not %d", MaxPrincipalRoles, len(roles))
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
// valid id (see MaxIDLength), or there are more than MaxPrincipalRoles
// roles (see checkAccountRoles), or more than MaxAccountAttributes
// attributes, or an attribute's name is empty or longer than
// MaxAttributeNameLength, its value longer than MaxAttributeValueLength,
// or its name or value is not UTF-8 or holds a control or formatting
// character (hasControl). Nothing is created or audited then.
func (e *Engine) CreateAccount(ctx context.Context, a Account) (Account, error) {
	if !e.ops.enter() { // Shutdown waits for its record (inflight.go)
		return Account{}, errShutdown()
	}
	defer e.ops.leave()
	if err := e.auditGuard(ctx); err != nil {
		return Account{}, err
	}
	if err := validID("an account id", a.ID); err != nil {
		return Account{}, err
	}
	if err := validIDs("a role name", a.Roles); err != nil {
		return Account{}, err
	}
	if err := checkAccountRoles(uniqueSorted(a.Roles)); err != nil {
		return Account{}, err
	}
	if err := validAttributes(a.Attributes); err != nil {
		return Account{}, err
	}
	c := cloneAccount(&a)
	c.Roles = uniqueSorted(c.Roles)
	if c.Roles == nil {
		c.Roles = []string{}
	}
	c.CreatedAt = e.now().UTC()
	written := noWait
	if err := e.dir.createAccount(ctx, &c, func() {
		written = e.auditInOrder(EventAccountCreated.record("", CodeOK, store.AuditRecord{Principal: c.ID}))
		if e.denyRuleNames(c.Roles) {
			e.onAccessChanged() // the principal may hold contracts already
		}
	}); err != nil {
		return Account{}, err
	}
	written()
	return cloneAccount(&c), nil
}

// GetAccount returns one account (NOT_FOUND otherwise).
func (e *Engine) GetAccount(_ context.Context, id string) (Account, error) {
	return e.dir.account(id)
}

// ListAccounts returns every account, sorted by id. A caller that shows
// them to someone (an API) pages them with ListAccountsPage instead.
func (e *Engine) ListAccounts(_ context.Context) []Account { return e.dir.accountList() }

// MaxPageBytes is the byte budget of a page of ListAccountsPage and
// ListRolesPage (max > 0): a page ends before the entry that would take
// its entries past it, each counted as json.Marshal encodes it, with a
// comma between two. The first entry of a page is on it however large it
// is, so that paging by next moves on. The server holds a page of
// GET /v1/accounts, /v1/roles and /v1/programs to the same budget: a page
// the engine answers is never cut shorter than the server would cut it,
// and the engine copies no entry the server would leave off. 4 MiB holds
// a full page of accounts of a few hundred bytes, or about ten of the
// largest the write path takes (about 400 KB of JSON each).
const MaxPageBytes = 4 << 20

// ListAccountsPage returns one page of the accounts, sorted by id: the
// first max whose ids sort after after ("": from the first; max <= 0:
// every one after it), and next, the after of the page that follows: the
// last id of this one, or "" when no account follows it. A page of max > 0
// also ends where its accounts reach MaxPageBytes of JSON: a page may hold
// fewer than max entries while next is set. It holds the page alone, never
// a copy of the whole directory, so a page of ten of a million accounts
// costs ten copies, and a page of max 10,000 of the largest accounts at
// most about fifty. An after that is not a valid account id (see MaxIDLength), which
// no page ever names, is INVALID_ARGUMENT. Each page reads the directory
// as it is then: an account created or deleted between two pages is
// listed or not by where its id falls, and no account that stays is
// listed twice or missed.
func (e *Engine) ListAccountsPage(_ context.Context, after string, max int) (accounts []Account, next string, err error) {
	return listPage(after, max, "an account id", e.dir.accountPage, func(a *Account) string { return a.ID })
}

// listPage is one page of a listing by id or name (ListAccountsPage,
// ListRolesPage): the entries page finds after the id after, at most max,
// and next, the id (key) of the last when page reports that another
// follows. An after that is not a valid id (what: of which kind) is
// INVALID_ARGUMENT, and page is not called.
func listPage[T any](after string, max int, what string, page func(after string, max int) ([]T, bool), key func(*T) string) (entries []T, next string, err error) {
	if after != "" {
		if err := validID("after, "+what, after); err != nil {
			return nil, "", err
		}
	}
	entries, more := page(after, max)
	if more {
		next = key(&entries[len(entries)-1])
	}
	return entries, next, nil
}

// DeleteAccount removes an account; contracts that relied on its roles
// stop working at their next check. The grants issued to it are forgotten
// with it, and their tokens refused from then on. The revocations of
// those of them that were revoked stay until the grants have expired
// (the retention pass forgets them an hour after): a grant record that
// comes back by any path (a node that cannot compare what it writes
// over, a store written behind the broker's back) is still refused.
//
// It takes access away only: it goes on once Shutdown began, while the
// store is open (see Engine.Shutdown).
func (e *Engine) DeleteAccount(ctx context.Context, id string) error {
	leave, err := e.enterRevocation() // Shutdown waits for its record (inflight.go)
	if err != nil {
		return err
	}
	defer leave()
	written := noWait
	if err := e.dir.deleteAccount(ctx, id, func() {
		written = e.auditInOrder(EventAccountDeleted.record("", CodeOK, store.AuditRecord{Principal: id}))
		e.onAccessChanged()
	}); err != nil {
		return err
	}
	written()
	return e.clusterBarrier(ctx)
}

// AddAccountRole gives account id the role. A role that a catalog deny
// rule names takes access away: every contract and subscription of the
// account that holds an operation the rule refuses fails its next check
// with GRANT_REVOKED; in a cluster, on every live node once it returns
// (see ClusterBarrier). An account holds at most MaxPrincipalRoles roles
// (see checkAccountRoles): a role it does not hold, given to an account
// that holds as many, is INVALID_ARGUMENT, and nothing is changed or
// audited.
func (e *Engine) AddAccountRole(ctx context.Context, id, role string) (Account, error) {
	if !e.ops.enter() { // Shutdown waits for its record (inflight.go)
		return Account{}, errShutdown()
	}
	defer e.ops.leave()
	if err := e.auditGuard(ctx); err != nil {
		return Account{}, err
	}
	if err := validID("a role name", role); err != nil {
		return Account{}, err
	}
	// The record is queued under the directory's lock, so that the
	// records of two role changes are in the order they were made.
	written := noWait
	a, err := e.dir.updateAccount(ctx, id, func(a *Account) error {
		// Judged against the account as it is when the role is given,
		// under the lock that changes it.
		next := uniqueSorted(append(a.Roles, role))
		if len(next) > len(uniqueSorted(a.Roles)) {
			if err := checkAccountRoles(next); err != nil {
				return err
			}
		}
		a.Roles = next
		return nil
	}, func(_, _ *Account) {
		written = e.auditInOrder(EventAccountRoleAdded.record("", CodeOK, store.AuditRecord{Principal: id, Ref: role}))
	})
	written()
	if err == nil {
		if e.denyRuleNames([]string{role}) {
			// A deny rule names it: giving it takes access away, at once.
			e.onAccessChanged()
			err = e.clusterBarrier(ctx)
		}
	}
	return a, err
}

// RemoveAccountRole takes the role from account id, and from every grant
// issued to the account: giving the role back later gives it to grants
// issued from then on, not to these. It takes effect at the
// very next authorization check of every contract and subscription that
// relied on it; in a cluster, on every live node once it returns (see
// ClusterBarrier; CLUSTER_UNCONFIRMED: the role is removed, but a node did
// not confirm it in time). Like every change that only takes access away
// (DeleteRole, DeleteAccount, RevokeGrant), it goes on while the audit log
// cannot be written, where the changes that give access are refused (the
// audit guard): its account.role.removed record is then lost, and counted
// in audit.resumed. For the same reason it goes on once Shutdown began,
// while the store is open (see Engine.Shutdown). A role that a catalog
// deny rule names is the exception: taking it lifts the deny, which may
// give access, so it is judged as a change that gives access (refused
// while the audit log cannot be written, and once Shutdown began).
func (e *Engine) RemoveAccountRole(ctx context.Context, id, role string) (Account, error) {
	lifts := e.denyRuleNames([]string{role})
	var leave func()
	var err error
	switch {
	case !lifts:
		leave, err = e.enterRevocation() // Shutdown waits for its record (inflight.go)
	case e.ops.enter():
		leave = e.ops.leave
	default:
		err = errShutdown()
	}
	if err != nil {
		return Account{}, err
	}
	defer leave()
	if lifts {
		if err := e.auditGuard(ctx); err != nil {
			return Account{}, err
		}
	}
	if err := validID("a role name", role); err != nil {
		return Account{}, err // no role has it: nothing to take, write or audit
	}
	written := noWait
	a, err := e.dir.removeAccountRole(ctx, id, role, func() {
		// Queued under the directory's lock, as AddAccountRole's record.
		written = e.auditInOrder(EventAccountRoleRemoved.record("", CodeOK, store.AuditRecord{Principal: id, Ref: role}))
	})
	written()
	if err == nil {
		e.onAccessChanged()
		err = e.clusterBarrier(ctx)
	}
	return a, err
}

// PutRole defines or replaces a role. The name must be a valid id (see
// MaxIDLength), selectors must parse and operations must be known. A role
// holds at most MaxRolePermissions permissions, and a permission lists at
// most MaxPermissionOperations operations: a longer list is
// INVALID_ARGUMENT, and nothing is written or audited (a role defined
// before keeps its definition). A contract or subscription that relied on
// a permission the new definition drops or narrows fails its next check
// with GRANT_REVOKED. Once Shutdown began, a definition that only
// narrows the role's (each permission one of its permissions, with the
// same operations or fewer) takes access away only, and goes on while
// the store is open (see Engine.Shutdown); any other is refused
// SHUTTING_DOWN, as it is judged under the lock that changes the role.
// The same holds while the audit log cannot be written: a definition
// that only narrows the role goes on (its record lost, counted in
// audit.resumed), any other is refused with the log's error.
func (e *Engine) PutRole(ctx context.Context, r Role) (Role, error) {
	var check func(cur *Role) error
	leave := e.ops.leave
	if !e.ops.enter() { // Shutdown waits for its record (inflight.go)
		var err error
		if leave, err = e.enterRevocation(); err != nil {
			return Role{}, err
		}
		check = func(cur *Role) error {
			if !narrows(cur, &r) {
				return errShutdown() // it would give access
			}
			return nil
		}
	}
	defer leave()
	if err := e.auditGuard(ctx); err != nil {
		// While the audit log cannot be written, a definition that only
		// narrows the role takes access away, and goes on as a
		// revocation does (its record lost, counted in audit.resumed);
		// any other is refused with the log's error.
		shutdown := check
		check = func(cur *Role) error {
			if !narrows(cur, &r) {
				return err
			}
			if shutdown != nil {
				return shutdown(cur)
			}
			return nil
		}
	}
	if err := validID("a role name", r.Name); err != nil {
		return Role{}, err
	}
	if n := len(r.Permissions); n > MaxRolePermissions {
		// Counted before any is checked: a longer list costs no more.
		return Role{}, NewError(CodeInvalidArgument, "a role holds at most %d permissions, not %d", MaxRolePermissions, n)
	}
	for i, p := range r.Permissions {
		if err := checkPermission(i, p); err != nil {
			return Role{}, err
		}
	}
	c := Role{Name: r.Name, Permissions: slices.Clone(r.Permissions)}
	if c.Permissions == nil {
		c.Permissions = []Permission{}
	}
	written := noWait
	if err := e.dir.putRoleIf(ctx, &c, check, func() {
		written = e.auditInOrder(EventRoleDefined.record("", CodeOK, store.AuditRecord{Ref: c.Name}))
		e.onAccessChanged()
	}); err != nil {
		return Role{}, err
	}
	written()
	return c, e.clusterBarrier(ctx)
}

// GetRole returns one role.
func (e *Engine) GetRole(_ context.Context, name string) (Role, error) { return e.dir.role(name) }

// ListRoles returns every role, sorted by name. A caller that shows them
// to someone (an API) pages them with ListRolesPage instead.
func (e *Engine) ListRoles(_ context.Context) []Role { return e.dir.roleList() }

// ListRolesPage returns one page of the roles, sorted by name, as
// ListAccountsPage pages the accounts: the first max after the name after,
// fewer where they reach MaxPageBytes of JSON (a page may hold fewer than
// max entries while next is set), and next, the after of the page that
// follows ("" when none follows). An after that is not a valid role name
// is INVALID_ARGUMENT.
func (e *Engine) ListRolesPage(_ context.Context, after string, max int) (roles []Role, next string, err error) {
	return listPage(after, max, "a role name", e.dir.rolePage, func(r *Role) string { return r.Name })
}

// DeleteRole removes a role definition. Every contract and subscription
// that relied on one of its permissions fails its next check with
// GRANT_REVOKED, as when the role is taken from the account. It takes
// access away only: it goes on once Shutdown began, while the store is
// open (see Engine.Shutdown).
func (e *Engine) DeleteRole(ctx context.Context, name string) error {
	leave, err := e.enterRevocation() // Shutdown waits for its record (inflight.go)
	if err != nil {
		return err
	}
	defer leave()
	written := noWait
	if err := e.dir.deleteRole(ctx, name, func() {
		written = e.auditInOrder(EventRoleDeleted.record("", CodeOK, store.AuditRecord{Ref: name}))
		e.onAccessChanged()
	}); err != nil {
		return err
	}
	written()
	return e.clusterBarrier(ctx)
}

// PutAccountKeys replaces the public keys account id publishes. Keys that
// are no longer valid stay listed so older signatures still verify; callers
// rotate by adding a key with a later NotBefore and closing the old one's
// NotAfter. A key belongs for good to the first account that publishes
// it: one that another account publishes, or published before it dropped
// the key or was deleted, is refused with CONFLICT, since every signature
// and sealed payload the key made would verify as the new holder's. Like
// the other account methods it trusts its caller: the embedding program
// decides who may publish what. A remote caller goes through
// PutAccountKeysAs. The change is audited as account.keys.published
// (principal: the account; ref: what changed, see PutAccountKeysAs). A
// list that only removes keys or narrows their windows withdraws access:
// like a revocation it goes on while the audit log cannot be written (its
// record lost, counted in audit.resumed) and once Shutdown began, while
// the store is open; any other is refused then.
func (e *Engine) PutAccountKeys(ctx context.Context, id string, keys []PublicKey) (Account, error) {
	return e.putAccountKeys(ctx, nil, id, keys)
}

// PutAccountKeysAs replaces the public keys account id publishes on behalf
// of p, as PutAccountKeys does, for a caller that is not trusted with every
// list. The account itself (p.ID is id, authenticated by its own
// credential) publishes any list. Anyone else, and any grant token (a grant
// hands out roles, not the keys that sign and seal as the account), must
// hold the role admin and may only remove keys or narrow their windows:
// adding a key, changing a key's bytes, use or alg, or widening a window is
// FORBIDDEN and changes nothing. A key listed under an account is what
// senders seal for and what verifies as the account: an admin free to
// list one of its own would read what is sealed for the account from then
// on. The list is judged against the account's keys as they are when it
// replaces them, under the lock that changes the account: a list read
// before the account removed a key cannot put the key back.
//
// Refusals (FORBIDDEN, CONFLICT, BAD_REQUEST, INVALID_ARGUMENT beyond
// MaxAccountKeys keys) are returned, not audited:
// the caller knows how it was asked (the server audits them as
// access.denied). A change is audited as account.keys.published, in the
// order of the changes: principal the account, ref "by P: CHANGES" where
// P is p's id (past 256 bytes cut, with "…#" and 16 hex digits of its
// SHA-256 after it; followed by " via grant" for a grant token) and CHANGES
// lists the kids added ("+kid"), removed ("-kid") and changed ("~kid"),
// or "no change"; past 480 bytes the kids left are counted, "(N more)".
func (e *Engine) PutAccountKeysAs(ctx context.Context, p *Principal, id string, keys []PublicKey) (Account, error) {
	if p == nil {
		return Account{}, NewError(CodeInvalidArgument, "PutAccountKeysAs needs the principal that acts")
	}
	return e.putAccountKeys(ctx, p, id, keys)
}

// putAccountKeys replaces account id's keys, for p when not nil (see
// PutAccountKeysAs), for the embedding program otherwise.
//
// Once Shutdown began, a list that only removes keys or narrows their
// windows takes access away only, and goes on while the store is open
// (see Engine.Shutdown); any other is refused SHUTTING_DOWN, as it is
// judged under the lock that changes the account.
func (e *Engine) putAccountKeys(ctx context.Context, p *Principal, id string, keys []PublicKey) (Account, error) {
	removing := false // Shutdown began: the list may only take away
	leave := e.ops.leave
	if !e.ops.enter() { // Shutdown waits for its record (inflight.go)
		var err error
		if leave, err = e.enterRevocation(); err != nil {
			return Account{}, err
		}
		removing = true
	}
	defer leave()
	// While the audit log cannot be written, a list that only removes
	// keys or narrows their windows takes access away, and goes on as a
	// revocation does (its record lost, counted in audit.resumed): a
	// compromised key is withdrawn on a full disk too. Any other is
	// refused with the log's error.
	guard := e.auditGuard(ctx)
	if err := checkKeys(keys); err != nil {
		return Account{}, err
	}
	narrowOnly := p != nil && (p.ID != id || p.Method == AuthGrant)
	if narrowOnly && !p.HasRole(RoleAdmin) {
		return Account{}, NewError(CodeForbidden, "only the account itself (not a grant token of it) or an admin may change its keys")
	}
	written := noWait
	a, err := e.dir.updateAccount(ctx, id, func(a *Account) error {
		if _, widened := keysNotNarrowed(a.Keys, keys); widened {
			switch {
			case guard != nil:
				return guard // it would give access
			case removing:
				return errShutdown() // it would give access
			}
		}
		if !narrowOnly {
			a.Keys = slices.Clone(keys)
			return nil
		}
		if kid, widened := keysNotNarrowed(a.Keys, keys); widened {
			return NewError(CodeForbidden,
				"an admin may remove another account's keys or narrow their windows, not publish key %q: only the account itself publishes a key or widens its window", kid)
		}
		a.Keys = slices.Clone(keys)
		return nil
	}, func(before, after *Account) {
		written = e.auditInOrder(EventAccountKeysPublished.record("", CodeOK, store.AuditRecord{Principal: id, Ref: keysChangeRef(p, before.Keys, after.Keys)}))
	})
	written()
	if err == nil {
		err = e.clusterBarrier(ctx)
	}
	return a, err
}

// keysNotNarrowed returns the kid of the first key of next that is not a
// key of cur (the same kid, use, alg and key) valid within that key's
// window, and true; or false when next only removes keys of cur or
// narrows their windows. (cur holds each kid once: ValidateKeys.)
func keysNotNarrowed(cur, next []PublicKey) (string, bool) {
	for _, k := range next {
		i := slices.IndexFunc(cur, func(c PublicKey) bool { return c.KID == k.KID })
		if i < 0 {
			return k.KID, true
		}
		c := cur[i]
		if c.Use != k.Use || c.Alg != k.Alg || c.Key != k.Key ||
			!c.NotBefore.IsZero() && (k.NotBefore.IsZero() || k.NotBefore.Before(c.NotBefore)) ||
			!c.NotAfter.IsZero() && (k.NotAfter.IsZero() || k.NotAfter.After(c.NotAfter)) {
			return k.KID, true
		}
	}
	return "", false
}

// maxKeysRef bounds the ref of an account.keys.published record, under
// the 512 bytes the audit log keeps of a text (an actor of 256 bytes and
// 128 kids of 128 would be over 16 KiB): the kids that do not fit are
// counted, "(N more)".
const maxKeysRef = 480

// keysChangeRef is the ref of the account.keys.published record of a
// change from old to next made by p (nil: the embedding program): "by
// P: " (P's id, " via grant" after it for a grant token), then the kids
// added ("+kid"), removed ("-kid") and changed ("~kid": its key, use, alg
// or window) in that order, or "no change". Kids are printable ASCII
// without spaces (checkKID), so the list reads back unambiguously.
func keysChangeRef(p *Principal, old, next []PublicKey) string {
	var added, removed, changed []string
	for _, k := range next {
		i := slices.IndexFunc(old, func(c PublicKey) bool { return c.KID == k.KID })
		switch {
		case i < 0:
			added = append(added, "+"+k.KID)
		case !sameKey(old[i], k):
			changed = append(changed, "~"+k.KID)
		}
	}
	for _, c := range old {
		if !slices.ContainsFunc(next, func(k PublicKey) bool { return k.KID == c.KID }) {
			removed = append(removed, "-"+c.KID)
		}
	}
	var b strings.Builder
	if p != nil {
		b.WriteString("by " + keysActor(p.ID))
		if p.Method == AuthGrant {
			b.WriteString(" via grant")
		}
		b.WriteString(":")
	}
	all := slices.Concat(added, removed, changed)
	if len(all) == 0 {
		all = []string{"no change"}
	}
	const room = len(" (128 more)") // at most 2*MaxAccountKeys changes
	for i, c := range all {
		need := 1 + len(c)
		if i < len(all)-1 {
			need += room // what is left must still be counted
		}
		if b.Len()+need > maxKeysRef {
			b.WriteString(" (" + strconv.Itoa(len(all)-i) + " more)")
			break
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(c)
	}
	return b.String()
}

// maxKeysActor bounds the actor's id in a keys change's ref, so the
// changes keep room beside an id of up to 1024 bytes (an OIDC principal).
const maxKeysActor = 256

// keysActor is id as a keys change's ref names it: whole up to
// maxKeysActor bytes; a longer id is cut at a rune and followed by
// "…#" and 16 hex digits of its SHA-256, which keeps two long ids that
// share a prefix apart.
func keysActor(id string) string {
	if len(id) <= maxKeysActor {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	tail := "…#" + hex.EncodeToString(sum[:8])
	cut := maxKeysActor - len(tail)
	for cut > 0 && !utf8.RuneStart(id[cut]) {
		cut--
	}
	return id[:cut] + tail
}

// sameKey reports whether a and b are the same key with the same window.
func sameKey(a, b PublicKey) bool {
	return a.KID == b.KID && a.Use == b.Use && a.Alg == b.Alg && a.Key == b.Key &&
		a.NotBefore.Equal(b.NotBefore) && a.NotAfter.Equal(b.NotAfter)
}

// AccountKeys returns the public keys account id publishes.
func (e *Engine) AccountKeys(_ context.Context, id string) ([]PublicKey, error) {
	return e.dir.accountKeys(id)
}

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
