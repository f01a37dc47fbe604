package pigeon

import (
	"context"
	"slices"
	"sort"
)

// The directory's roles: the copies it hands out, and the definition and
// deletion of a role.

// role returns a copy of role name (NOT_FOUND otherwise).
func (d *directory) role(name string) (Role, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	r, ok := d.roles[name]
	if !ok {
		return Role{}, NewError(CodeNotFound, "no role %s", name)
	}
	return Role{Name: r.Name, Permissions: slices.Clone(r.Permissions)}, nil
}

// roleList returns a copy of every role, sorted by name.
func (d *directory) roleList() []Role {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make([]Role, 0, len(d.roles))
	for _, r := range d.roles {
		out = append(out, Role{Name: r.Name, Permissions: slices.Clone(r.Permissions)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// rolePage returns copies of the first max roles by name that sort after
// the name after (every one after it when max <= 0), fewer where they
// would pass MaxPageBytes, and whether another follows them (pageOf).
func (d *directory) rolePage(after string, max int) (page []Role, more bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return pageOf(d.mu.RLocker(), &d.roleIndex, d.roleMap, after, max, func(r *Role) Role { return Role{Name: r.Name, Permissions: slices.Clone(r.Permissions)} }, roleJSONLen)
}

// putRole defines or replaces role r, then calls then. It writes only
// over the definition this node holds, or where the store holds none when
// this node holds none (see fresh): a node not yet told of another node's
// change of the role (a redefinition, a deletion) reads the directory
// again, then puts the role as asked. A put is a whole definition, given
// by its caller, so the later put wins; a role deleted elsewhere is
// defined again only by a put of it, never written back by a change of
// something else. A role the directory does not hold, put when it holds
// as many as its quota (roleQuota), is INVALID_ARGUMENT, and nothing is
// written; a role it holds is redefined whatever their number.
func (d *directory) putRole(ctx context.Context, r *Role, then func()) error {
	return d.putRoleIf(ctx, r, nil, then)
}

// putRoleIf is putRole, refused with check's error, with nothing written,
// when check (when not nil) refuses the role's definition as this node
// holds it (nil: none), under the lock that changes it.
func (d *directory) putRoleIf(ctx context.Context, r *Role, check func(cur *Role) error, then func()) error {
	return d.fresh(ctx, func() error { return d.putRoleOnce(ctx, r, check, then) })
}

func (d *directory) putRoleOnce(ctx context.Context, r *Role, check func(cur *Role) error, then func()) error {
	defer d.lockChange()()
	cur := d.roles[r.Name]
	if check != nil {
		if err := check(cur); err != nil {
			return err
		}
	}
	f, err := d.find(ctx, bucketRoles, r.Name, none(cur))
	if err != nil {
		return err
	}
	// A role this node does not hold, which the store does not hold
	// either (find), is a new one: held to the quota before it is written.
	if cur == nil {
		if err := d.roleQuota(); err != nil {
			return err
		}
	}
	if err := d.replace(ctx, f, r); err != nil {
		return err
	}
	d.roles[r.Name] = r
	d.roleIndex.Changed(r.Name)
	d.bump()
	then()
	return nil
}

// deleteRole removes role name, then calls then. A role this node has
// not heard of is looked for in the store before it is NOT_FOUND (see
// absent): one defined on another node a moment ago is deleted here too.
// One deleted elsewhere since this node read the directory is NOT_FOUND
// once read again (see fresh).
func (d *directory) deleteRole(ctx context.Context, name string, then func()) error {
	return d.fresh(ctx, func() error { return d.deleteRoleOnce(ctx, name, then) })
}

func (d *directory) deleteRoleOnce(ctx context.Context, name string, then func()) error {
	defer d.lockChange()()
	cur, ok := d.roles[name]
	if !ok {
		return d.absent(ctx, bucketRoles, name, nil, NewError(CodeNotFound, "no role %s", name))
	}
	if err := d.write(ctx, bucketRoles, name, cur, nil); err != nil {
		return err
	}
	delete(d.roles, name)
	d.roleIndex.Changed(name)
	d.bump()
	then()
	return nil
}

// narrows reports whether next, a role's new definition, grants nothing
// that cur, its definition now, does not: each of next's permissions is
// one of cur's (the same subject and selector) with the same operations
// or fewer. A role cur does not hold (nil) is not narrowed by any.
func narrows(cur, next *Role) bool {
	if cur == nil {
		return false
	}
	for _, p := range next.Permissions {
		if !slices.ContainsFunc(cur.Permissions, func(q Permission) bool {
			return q.Subject == p.Subject && q.Selector == p.Selector && !slices.ContainsFunc(p.Operations, func(op Operation) bool { return !slices.Contains(q.Operations, op) })
		}) {
			return false
		}
	}
	return true
}
