package pigeon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"time"

	"pigeon/store"
)

// The grants the directory keeps: issued, revoked, forgotten with their
// account, and pruned once expired.

// addGrant records an issued grant, with those of its roles that its
// account holds now (NOT_FOUND when the account is gone since): a grant
// carries only roles its account held when it was issued, so giving the
// account a role later does not give it to the grants issued before. It
// calls then under the lock once the grant is stored. An account that
// holds as many live grants as its quota (grantQuota) is INVALID_ARGUMENT,
// and nothing is written. The account's roles
// are those the store holds (see fresh): a node not yet told that another
// took a role from the account issues no grant carrying it.
//
// The account is looked at again once the grant is written: a change of
// the account made on another node meanwhile (deleted, a role taken from
// it), which did not hear of the grant, would otherwise leave the grant
// behind (an orphan of a deleted account) or carrying the role. Found
// changed, the grant is taken back (withdrawGrant) and issued once more
// on the directory read again (see fresh): NOT_FOUND for a deleted
// account. Of the two nodes, the one that looks second sees the other's
// write: the other node, once its change is stored, looks for the grants
// it did not hear of (sweepGrants).
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
		// One created on another node a moment ago is read, and the
		// grant issued to it, once looked for (absent).
		return d.absent(ctx, bucketAccounts, g.Account, none(a), NewError(CodeNotFound, "no account %s", g.Account))
	}
	if _, err := d.find(ctx, bucketAccounts, a.ID, a); err != nil {
		return err
	}
	// Counted at its issue, in whole seconds as its expiry is.
	if err := d.grantQuota(a, g.IssuedAt); err != nil {
		return err
	}
	g.Roles = intersect(g.Roles, a.Roles)
	if g.Roles == nil {
		g.Roles = []string{}
	}
	if err := d.write(ctx, bucketGrants, g.JTI, nil, g); err != nil {
		return err
	}
	if _, err := d.find(ctx, bucketAccounts, a.ID, a); err != nil {
		if werr := d.withdrawGrant(ctx, g); werr != nil {
			return werr
		}
		return err
	}
	d.putGrant(g)
	d.bump()
	then()
	return nil
}

// putGrant puts g in d.grants, and its jti among its account's grants
// (grantsOf). A grant replaced by one of the same account (narrowed) is
// put in d.grants alone. d.mu is held for writing (or d is not yet
// shared, while it is read).
func (d *directory) putGrant(g *grantRecord) {
	d.grants[g.JTI] = g
	if d.grantsOf == nil {
		d.grantsOf = map[string]map[string]struct{}{}
	}
	jtis := d.grantsOf[g.Account]
	if jtis == nil {
		jtis = map[string]struct{}{}
		d.grantsOf[g.Account] = jtis
	}
	jtis[g.JTI] = struct{}{}
}

// grantsOfAccount returns the jtis of the grants issued to account id (to
// it, or to an earlier account of its id), in order, from the index
// (grantsOf): a change of one account (deleteAccountOnce,
// removeAccountRoleOnce) goes through its own grants, however many the
// directory holds. The order is the jtis', so that a store failing half
// way leaves the same grants changed whichever run it was. d.mu is held.
func (d *directory) grantsOfAccount(id string) []string {
	return slices.Sorted(maps.Keys(d.grantsOf[id]))
}

// dropGrant deletes grant jti from d.grants and from its account's
// grants (grantsOf). d.mu is held for writing.
func (d *directory) dropGrant(jti string) {
	g, ok := d.grants[jti]
	if !ok {
		return
	}
	delete(d.grants, jti)
	if jtis := d.grantsOf[g.Account]; jtis != nil {
		delete(jtis, jti)
		if len(jtis) == 0 {
			delete(d.grantsOf, g.Account)
		}
	}
}

// revokeGrant revokes grant jti and returns the account it was issued
// to, calling then with it under the lock. Revoking twice is not an
// error, nor revoking a grant another node revoked since this node read
// the directory (see fresh). A grant this node has not heard of is
// looked for in the store before it is NOT_FOUND (see absent): one
// issued on another node a moment ago is revoked here too. A jti that is
// not a valid id, which no grant has, is NOT_FOUND without a look, and a
// look writes nothing: made-up jtis cost a read each and leave no
// record. A grant forgotten on another node since this node read it (its
// account deleted, or the grant pruned) is NOT_FOUND once read again: no
// revocation is written for a grant the store no longer holds.
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
		notFound := NewError(CodeNotFound, "no grant %s", jti)
		if validID("a grant id", jti) != nil {
			return "", notFound // load skips a grant of such an id
		}
		// Issued on another node since this node read the directory, perhaps.
		return "", d.absent(ctx, bucketGrants, jti, nil, notFound)
	}
	if _, done := d.revoked[jti]; !done {
		if _, err := d.find(ctx, bucketGrants, jti, g); err != nil {
			return "", err // forgotten (or narrowed) elsewhere: read again
		}
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
	d.dropGrant(jti)
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

// withdrawGrant takes back g, which addGrantOnce wrote and found its
// account changed since: the record goes, whatever another node made of
// it meanwhile (sweepGrants narrowing or deleting it). d.mu is held for
// writing.
func (d *directory) withdrawGrant(ctx context.Context, g *grantRecord) error {
	sw, ok := d.st.(store.KVSwapper)
	if !ok {
		return storeError(d.st.Delete(ctx, bucketGrants, g.JTI))
	}
	b, err := json.Marshal(g)
	if err != nil {
		return WrapError(CodeInternal, err, "encode %s", bucketGrants)
	}
	_, _, err = d.swapGrant(ctx, sw, g.JTI, b, func(*grantRecord) (*grantRecord, bool) { return nil, true })
	return err
}

// sweepTries is how often sweepGrants and withdrawGrant swap a grant
// record that other nodes change meanwhile before they give up on it.
const sweepTries = 4

// swapGrant changes grant jti, which the store held as b when it was
// read, to what change makes of it (nil: deletes it; ok false: leaves it
// as it is), by store.KVSwapper from the bytes read. A record another
// node changed in between is read again and changed again, up to
// sweepTries times; one gone meanwhile is left gone. It returns what it
// wrote (changed: it wrote next, nil for a deletion).
func (d *directory) swapGrant(ctx context.Context, sw store.KVSwapper, jti string, b []byte, change func(g *grantRecord) (next *grantRecord, ok bool)) (next *grantRecord, changed bool, err error) {
	for try := 1; ; try++ {
		g, err := loadGrant(quiet, jti, b)
		if err != nil {
			g = nil // a record load refuses: change judges none
		}
		next, ok := change(g)
		if !ok {
			return nil, false, nil
		}
		var val []byte
		if next != nil {
			if val, err = json.Marshal(next); err != nil {
				return nil, false, WrapError(CodeInternal, err, "encode %s", bucketGrants)
			}
		}
		err = sw.Swap(ctx, bucketGrants, jti, b, val)
		if err == nil {
			return next, true, nil
		}
		if !errors.Is(err, store.ErrChanged) {
			return nil, false, storeError(err)
		}
		if try == sweepTries {
			return nil, false, NewError(CodeStoreUnavailable, "grant %s changed %d times while it was written; retry", jti, sweepTries)
		}
		b, err = d.st.Get(ctx, bucketGrants, jti)
		if errors.Is(err, store.ErrNotFound) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, storeError(err)
		}
	}
}

// sweepGrants makes what a change of account a made of the grants this
// node holds for it of every grant the store holds for it (issued to a
// itself, not to an earlier account of its id): it takes role from them
// or, with role "", deletes them with a, which is deleted. A grant issued
// on another node a moment before the change, which this node had not
// heard of, is in the store only, and the change passed it by: it would
// be left behind by a deleted account until it expires (worth nothing,
// its account gone, but a record all the same), and keep a role taken
// from its account, in force again were the role given back. The issuing
// node looks at the account once its grant is written (addGrantOnce):
// of the two, the one that looks second sees the other's write.
//
// It reads the grants the broker wrote (an account spelled as
// json.Marshal spells it) and only decodes those that name a. It holds
// d.changing while it reads and writes them, as a reload does, and d.mu
// only to make this node's copy of a grant it changed what it wrote.
// Nothing it does is refused: a store that fails it leaves the grants it
// did not reach (worth nothing for a deleted account; without the role
// while the account is), with a logged warning. A store that cannot swap
// is not read (see find), nor one this node does not share (d.shared):
// alone, the node's copy holds every grant, and the change went through
// them all.
func (d *directory) sweepGrants(ctx context.Context, a *Account, role string) {
	sw, ok := d.st.(store.KVSwapper)
	if !ok || a == nil || !d.shared {
		return
	}
	if err := d.sweepGrantsOf(ctx, sw, a, role); err != nil {
		d.logger().Warn("pigeon: the grants another node issued to an account as it changed could not all be read or changed; those left are pruned once they expire",
			"account", a.ID, "role", role, "err", err)
	}
}

func (d *directory) sweepGrantsOf(ctx context.Context, sw store.KVSwapper, a *Account, role string) error {
	d.changing.Lock()
	defer d.changing.Unlock()
	kv, err := d.st.List(ctx, bucketGrants)
	if err != nil {
		return storeError(err)
	}
	id, err := json.Marshal(a.ID)
	if err != nil {
		return WrapError(CodeInternal, err, "encode %s", bucketGrants)
	}
	names := append([]byte(`"account":`), id...)
	for jti, b := range kv {
		if !bytes.Contains(b, names) {
			continue
		}
		next, changed, err := d.swapGrant(ctx, sw, jti, b, func(g *grantRecord) (*grantRecord, bool) {
			if g == nil || g.Account != a.ID || !g.of(a) {
				return nil, false
			}
			if role == "" {
				return nil, true
			}
			if !slices.Contains(g.Roles, role) {
				return nil, false
			}
			ng := *g
			ng.Roles = slices.DeleteFunc(slices.Clone(g.Roles), func(r string) bool { return r == role })
			return &ng, true
		})
		if err != nil {
			return err
		}
		if changed {
			d.sweptGrant(jti, next)
		}
	}
	return nil
}

// sweptGrant makes this node's copy of grant jti, when it holds one, what
// sweepGrants wrote (nil: deleted). d.changing is held.
func (d *directory) sweptGrant(jti string, next *grantRecord) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.grants[jti]; !ok {
		return
	}
	if next == nil {
		d.dropGrant(jti)
	} else {
		d.grants[jti] = next
	}
	d.bump()
}
