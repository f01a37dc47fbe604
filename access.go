package pigeon

import (
	"context"
	"maps"
	"slices"
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
