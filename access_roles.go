package pigeon

import (
	"context"
	"slices"

	"pigeon/store"
)

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
	leave, widening, err := e.enterNarrowing(ctx) // Shutdown waits for its record (inflight.go)
	if err != nil {
		return Role{}, err
	}
	defer leave()
	var check func(cur *Role) error
	if widening != nil {
		check = func(cur *Role) error {
			if !narrows(cur, &r) {
				return widening // it would give access
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
