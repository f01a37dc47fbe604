package pigeon

import (
	"context"
	"time"
)

// The grants the directory keeps: issued, revoked, forgotten with their
// account, and pruned once expired.

// addGrant records an issued grant, with those of its roles that its
// account holds now (NOT_FOUND when the account is gone since): a grant
// carries only roles its account held when it was issued, so giving the
// account a role later does not give it to the grants issued before. It
// calls then under the lock once the grant is stored. The account's roles
// are those the store holds (see fresh): a node not yet told that another
// took a role from the account issues no grant carrying it.
func (d *directory) addGrant(ctx context.Context, g *grantRecord, then func()) error {
	asked := g.Roles
	return d.fresh(ctx, func() error {
		g.Roles = asked
		return d.addGrantOnce(ctx, g, then)
	})
}

func (d *directory) addGrantOnce(ctx context.Context, g *grantRecord, then func()) error {
	defer d.lockChange()()
	if d.isBehind() {
		return errBehind() // the account's roles may be fewer on another node
	}
	a := d.accounts[g.Account]
	if a == nil || !g.of(a) {
		return NewError(CodeNotFound, "no account %s", g.Account)
	}
	if _, err := d.find(ctx, bucketAccounts, a.ID, a); err != nil {
		return err
	}
	g.Roles = intersect(g.Roles, a.Roles)
	if g.Roles == nil {
		g.Roles = []string{}
	}
	if err := d.write(ctx, bucketGrants, g.JTI, nil, g); err != nil {
		return err
	}
	d.grants[g.JTI] = g
	d.bump()
	then()
	return nil
}

// revokeGrant revokes grant jti (NOT_FOUND when it was never issued) and
// returns the account it was issued to, calling then with it under the
// lock. Revoking twice is not an error, nor revoking a grant another node
// revoked since this node read the directory (see fresh).
func (d *directory) revokeGrant(ctx context.Context, jti string, then func(account string)) (account string, err error) {
	err = d.fresh(ctx, func() error {
		account, err = d.revokeGrantOnce(ctx, jti, then)
		return err
	})
	return account, err
}

func (d *directory) revokeGrantOnce(ctx context.Context, jti string, then func(account string)) (account string, err error) {
	defer d.lockChange()()
	g, ok := d.grants[jti]
	if !ok {
		if d.isBehind() {
			return "", errBehind() // issued on another node since, perhaps
		}
		return "", NewError(CodeNotFound, "no grant %s", jti)
	}
	if _, done := d.revoked[jti]; !done {
		if err := d.write(ctx, bucketRevoked, jti, nil, g.ExpiresAt); err != nil {
			return "", err
		}
		d.revoked[jti] = g.ExpiresAt
		d.bump()
	}
	then(g.Account)
	return g.Account, nil
}

// forgetGrant deletes grant jti and, unless keepRevoked, its revocation,
// the record first: a token whose record is gone is refused whatever else
// remains. Each goes only if the store holds it as this node does
// (errStale otherwise). d.mu is held for writing.
func (d *directory) forgetGrant(ctx context.Context, jti string, keepRevoked bool) error {
	if err := d.write(ctx, bucketGrants, jti, none(d.grants[jti]), nil); err != nil {
		return err
	}
	delete(d.grants, jti)
	d.bump()
	if exp, ok := d.revoked[jti]; ok && !keepRevoked {
		if err := d.write(ctx, bucketRevoked, jti, exp, nil); err != nil {
			return err
		}
		delete(d.revoked, jti)
	}
	return nil
}

// pruneGrants forgets at most max grants, and revocations, that expired
// before cutoff: their tokens are refused for their expiry alone. It
// returns how many it forgot. It looks for them under the read lock, so
// that a pass with nothing to forget never holds up an authentication.
// One that meets a record another node changed (or forgot) reads the
// directory again and looks once more (see fresh).
func (d *directory) pruneGrants(ctx context.Context, cutoff time.Time, max int) (n int, err error) {
	err = d.fresh(ctx, func() error {
		var m int
		m, err = d.pruneGrantsOnce(ctx, cutoff, max)
		n += m
		return err
	})
	return n, err
}

func (d *directory) pruneGrantsOnce(ctx context.Context, cutoff time.Time, max int) (int, error) {
	var grants, revoked []string
	d.mu.RLock()
	for jti, g := range d.grants {
		if len(grants) < max && g.ExpiresAt.Before(cutoff) {
			grants = append(grants, jti)
		}
	}
	for jti, exp := range d.revoked {
		if _, ok := d.grants[jti]; !ok && len(grants)+len(revoked) < max && exp.Before(cutoff) {
			revoked = append(revoked, jti)
		}
	}
	d.mu.RUnlock()
	if len(grants)+len(revoked) == 0 {
		return 0, nil
	}
	defer d.lockChange()()
	n := 0
	for _, jti := range grants {
		if g := d.grants[jti]; g == nil || !g.ExpiresAt.Before(cutoff) {
			continue // gone meanwhile
		}
		if err := d.forgetGrant(ctx, jti, false); err != nil {
			return n, err
		}
		n++
	}
	for _, jti := range revoked {
		exp, ok := d.revoked[jti]
		if !ok || d.grants[jti] != nil {
			continue
		}
		if err := d.write(ctx, bucketRevoked, jti, exp, nil); err != nil {
			return n, err
		}
		delete(d.revoked, jti)
		n++
	}
	return n, nil
}

// grantExpiry returns when grant jti expires; ok is false for an unknown
// grant.
func (d *directory) grantExpiry(jti string) (at time.Time, ok bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if g := d.grants[jti]; g != nil {
		return g.ExpiresAt, true
	}
	return time.Time{}, false
}
