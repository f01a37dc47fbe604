package pigeon

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"sort"
	"time"

	"pigeon/store"
)

// The directory's accounts: the copies it hands out, and the changes of
// an account (creation, update, a role taken away, deletion).

func cloneAccount(a *Account) Account {
	c := *a
	c.Attributes = maps.Clone(a.Attributes)
	c.Roles = slices.Clone(a.Roles)
	c.Keys = slices.Clone(a.Keys)
	return c
}

// lookup returns account id, or nil. The account is shared: callers read
// it and never change it.
func (d *directory) lookup(id string) *Account {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.accounts[id]
}

// account returns a copy of account id (NOT_FOUND otherwise).
func (d *directory) account(id string) (Account, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	a, ok := d.accounts[id]
	if !ok {
		return Account{}, NewError(CodeNotFound, "no account %s", id)
	}
	return cloneAccount(a), nil
}

// accountFor returns a copy of account id for a change to be made of it
// (a grant issued to it): one this node has not heard of is looked for
// in the store before it is NOT_FOUND (see absent), and read with the
// directory once found there.
func (d *directory) accountFor(ctx context.Context, id string) (Account, error) {
	if a, err := d.account(id); err == nil {
		return a, nil
	}
	if err := d.fresh(ctx, func() error {
		_, notFound := d.account(id)
		if notFound == nil {
			return nil // read with the directory
		}
		return d.absent(ctx, bucketAccounts, id, nil, notFound)
	}); err != nil {
		return Account{}, err
	}
	return d.account(id)
}

// accountKeys returns a copy of the public keys account id publishes.
func (d *directory) accountKeys(id string) ([]PublicKey, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	a, ok := d.accounts[id]
	if !ok {
		return nil, NewError(CodeNotFound, "no account %s", id)
	}
	return slices.Clone(a.Keys), nil
}

// accountList returns a copy of every account, sorted by id.
func (d *directory) accountList() []Account {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make([]Account, 0, len(d.accounts))
	for _, a := range d.accounts {
		out = append(out, cloneAccount(a))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// accountPage returns copies of the first max accounts by id that sort
// after the id after (every one after it when max <= 0), fewer where they
// would pass MaxPageBytes, and whether another follows them (pageOf).
func (d *directory) accountPage(after string, max int) (page []Account, more bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return pageOf(d.mu.RLocker(), &d.accountIndex, d.accountMap, after, max, cloneAccount, accountJSONLen)
}

// createAccount adds account a (CONFLICT when its id exists, here or, in
// a store that can swap, on another node that created it since this node
// read the directory: see fresh; an account of the id this node holds
// that another node deleted since is read again, and a is created;
// INVALID_ARGUMENT, with nothing written, when the directory holds as
// many accounts as its quota: accountQuota), then calls then.
// a.CreatedAt, when not after every account's the directory has held,
// here or as the store keeps it (stampCreated), is moved a nanosecond
// past the latest (see created).
func (d *directory) createAccount(ctx context.Context, a *Account, then func()) error {
	return d.fresh(ctx, func() error { return d.createAccountOnce(ctx, a, then) })
}

func (d *directory) createAccountOnce(ctx context.Context, a *Account, then func()) error {
	defer d.lockChange()()
	if d.isBehind() {
		return errBehind() // the id may be taken, or a key claimed, on another node
	}
	if cur, ok := d.accounts[a.ID]; ok {
		if _, err := d.find(ctx, bucketAccounts, a.ID, cur); err != nil {
			return err // deleted elsewhere, perhaps: read again, it is created
		}
		return NewError(CodeConflict, "account %s exists", a.ID)
	}
	if !a.CreatedAt.After(d.created) {
		a.CreatedAt = d.created.Add(time.Nanosecond)
	}
	if err := checkKeys(a.Keys); err != nil {
		return err
	}
	// Looked up before the keys are reserved: an account another node
	// created since reserves none of them to its id.
	f, err := d.find(ctx, bucketAccounts, a.ID, nil)
	if err != nil {
		return err
	}
	// Before anything is written (the latest CreatedAt, the keys'
	// owners): a refusal leaves the store as it was.
	if err := d.accountQuota(); err != nil {
		return err
	}
	if err := d.stampCreated(ctx, a); err != nil {
		return err
	}
	if err := d.claimKeys(ctx, a.ID, nil, a.Keys); err != nil {
		return err
	}
	if err := d.reserveKeys(ctx, a.ID, a.Keys, true); err != nil {
		return err
	}
	if err := d.replace(ctx, f, a); err != nil {
		return err
	}
	d.accounts[a.ID] = a
	d.accountIndex.Changed(a.ID)
	d.indexKeys(a.ID, nil, a.Keys)
	d.created = a.CreatedAt
	d.bump()
	then()
	return nil
}

// updateAccount applies fn to a copy of account id and stores it, then
// calls then (when not nil) with the account before and after, under the
// lock: fn judges the change against the account as it is when it is
// made, and then's audit records of two changes are written in their
// order.
//
// The account is stored only if the store still holds it as this node
// does; otherwise fn is applied once more to the account as the store
// holds it (see fresh), and then is called for that change alone.
func (d *directory) updateAccount(ctx context.Context, id string, fn func(a *Account) error, then func(before, after *Account)) (out Account, err error) {
	err = d.fresh(ctx, func() error {
		out, err = d.updateAccountOnce(ctx, id, fn, then)
		return err
	})
	return out, err
}

func (d *directory) updateAccountOnce(ctx context.Context, id string, fn func(a *Account) error, then func(before, after *Account)) (Account, error) {
	defer d.lockChange()()
	if d.isBehind() {
		return Account{}, errBehind() // storing the old account would undo another node's change
	}
	cur, ok := d.accounts[id]
	if !ok {
		return Account{}, d.absent(ctx, bucketAccounts, id, nil, NewError(CodeNotFound, "no account %s", id))
	}
	c := cloneAccount(cur)
	if err := fn(&c); err != nil {
		return Account{}, err
	}
	f, err := d.find(ctx, bucketAccounts, id, cur)
	if err != nil {
		return Account{}, err
	}
	if err := d.claimKeys(ctx, id, cur.Keys, c.Keys); err != nil {
		return Account{}, err
	}
	if err := d.reserveKeys(ctx, id, newKeys(cur.Keys, c.Keys), true); err != nil {
		return Account{}, err
	}
	if err := d.reserveKeys(ctx, id, newKeys(c.Keys, cur.Keys), false); err != nil {
		return Account{}, err
	}
	if err := d.replace(ctx, f, &c); err != nil {
		return Account{}, err
	}
	d.accounts[id] = &c
	d.indexKeys(id, cur.Keys, c.Keys)
	d.bump()
	if then != nil {
		then(cur, &c)
	}
	return cloneAccount(&c), nil
}

// removeAccountRole takes role from account id (NOT_FOUND when there is
// no such account) and from every grant issued to it: a role taken away
// is gone from those grants for good, and giving it back gives it to the
// grants issued from then on only. The grants are narrowed first: should
// the store fail in between, the account keeps the role and some grants
// have lost it, never the other way round. Once the account is stored it
// calls then (when not nil) under the lock, so that the audit records of
// two changes of the account are written in their order.
//
// The account is looked up in the store before any grant is written, and
// each record is written only if the store still holds it as this node
// does (see fresh): a node not yet told that another deleted the account
// (and forgot its grants, revoked ones included) writes neither back. An
// account this node has not heard of is looked for in the store before
// it is NOT_FOUND (see absent). Once the account is stored, the grants
// the store holds for it are narrowed too (sweepGrants): one issued on
// another node a moment before, which this node had not heard of, does
// not keep the role, to be in force again were it given back.
func (d *directory) removeAccountRole(ctx context.Context, id, role string, then func()) (out Account, err error) {
	err = d.fresh(ctx, func() error {
		out, err = d.removeAccountRoleOnce(ctx, id, role, then)
		return err
	})
	if err == nil {
		d.sweepGrants(ctx, &out, role)
	}
	return out, err
}

func (d *directory) removeAccountRoleOnce(ctx context.Context, id, role string, then func()) (Account, error) {
	defer d.lockChange()()
	if d.isBehind() {
		return Account{}, errBehind() // storing the old account would undo another node's change
	}
	cur, ok := d.accounts[id]
	if !ok {
		return Account{}, d.absent(ctx, bucketAccounts, id, nil, NewError(CodeNotFound, "no account %s", id))
	}
	f, err := d.find(ctx, bucketAccounts, id, cur)
	if err != nil {
		return Account{}, err
	}
	for _, jti := range d.grantsOfAccount(id) {
		g := d.grants[jti]
		if g == nil || !slices.Contains(g.Roles, role) {
			continue
		}
		ng := *g
		ng.Roles = slices.DeleteFunc(slices.Clone(g.Roles), func(r string) bool { return r == role })
		if err := d.write(ctx, bucketGrants, jti, g, &ng); err != nil {
			d.bump() // grants narrowed before the failure are in force
			return Account{}, err
		}
		d.grants[jti] = &ng
	}
	c := cloneAccount(cur)
	c.Roles = slices.DeleteFunc(c.Roles, func(r string) bool { return r == role })
	if err := d.replace(ctx, f, &c); err != nil {
		d.bump()
		return Account{}, err
	}
	d.accounts[id] = &c
	d.bump()
	if then != nil {
		then()
	}
	return cloneAccount(&c), nil
}

// deleteAccount removes account id (NOT_FOUND otherwise) and the grants
// issued to it, then calls then. The grants go first: should the store
// fail between the two, the account is left with fewer grants, never an
// account of that id created later with the grants of this one. The
// revocations of its revoked grants stay until the grants expire
// (pruneGrants forgets them then): a grant record that comes back by any
// path (a node that cannot compare what it writes over, a store written
// behind the broker's back) is still refused. Each record goes only if
// the store still holds it as this node does (see fresh). An account this
// node has not heard of is looked for in the store before it is
// NOT_FOUND (see absent). Once the account is deleted, the grants the
// store holds for it go too (sweepGrants): one issued on another node a
// moment before, which this node had not heard of, is not left behind.
func (d *directory) deleteAccount(ctx context.Context, id string, then func()) error {
	var gone *Account
	if err := d.fresh(ctx, func() error {
		var err error
		gone, err = d.deleteAccountOnce(ctx, id, then)
		return err
	}); err != nil {
		return err
	}
	d.sweepGrants(ctx, gone, "")
	return nil
}

func (d *directory) deleteAccountOnce(ctx context.Context, id string, then func()) (*Account, error) {
	defer d.lockChange()()
	cur, ok := d.accounts[id]
	if !ok {
		return nil, d.absent(ctx, bucketAccounts, id, nil, NewError(CodeNotFound, "no account %s", id))
	}
	f, err := d.find(ctx, bucketAccounts, id, cur)
	if err != nil {
		return nil, err
	}
	for _, jti := range d.grantsOfAccount(id) {
		if err := d.forgetGrant(ctx, jti, true); err != nil {
			return nil, err
		}
	}
	if err := d.reserveKeys(ctx, id, cur.Keys, false); err != nil {
		return nil, err
	}
	if err := d.replace(ctx, f, nil); err != nil {
		return nil, err
	}
	d.indexKeys(id, d.accounts[id].Keys, nil)
	delete(d.accounts, id)
	d.accountIndex.Changed(id)
	d.bump()
	then()
	return cur, nil
}

// createdKey is the key, in bucketBroker, of the latest CreatedAt the
// directory gave an account (see created and stampCreated).
const createdKey = "accounts.created"

// createdTries is how often stampCreated reads and swaps the stored
// latest CreatedAt that other nodes move on meanwhile before the creation
// is refused, retryable.
const createdTries = 8

// stampCreated moves a.CreatedAt a nanosecond past the latest CreatedAt
// the store keeps (createdKey) when it is not after it, and keeps a's as
// the latest. An account's CreatedAt is what its contracts and grants
// tell it from an earlier account of its id by (see grantRecord.of), so
// no two accounts of the directory's history may have the same one: a
// node's created covers the accounts it held, but one started since an
// account was deleted (or restarted) never held it, and with a clock
// behind the node that created it, it would stamp an account created
// again under the id as its predecessor was, and honour the grants and
// contracts of the deleted account. The store keeps the latest across
// nodes and restarts, written with store.KVSwapper from the value read
// (another node's creation in between is read again), with a plain Put
// in a store that cannot swap. A stored value that does not decode is
// STORE_CORRUPT, and no account is created: the latest it held cannot be
// told. d.mu is held for writing.
func (d *directory) stampCreated(ctx context.Context, a *Account) error {
	for range createdTries {
		b, err := d.st.Get(ctx, bucketBroker, createdKey)
		if errors.Is(err, store.ErrNotFound) {
			b, err = nil, nil
		}
		if err != nil {
			return storeError(err)
		}
		if b != nil {
			var latest time.Time
			if err := decodeRecord(b, &latest); err != nil {
				return WrapError(CodeStoreCorrupt, err, "%s/%q does not decode: %v", bucketBroker, createdKey, err)
			}
			if !a.CreatedAt.After(latest) {
				a.CreatedAt = latest.Add(time.Nanosecond)
			}
		}
		v, err := json.Marshal(a.CreatedAt)
		if err != nil {
			return WrapError(CodeInternal, err, "encode %s", createdKey)
		}
		sw, ok := d.st.(store.KVSwapper)
		if !ok {
			return storeError(d.st.Put(ctx, bucketBroker, createdKey, v))
		}
		if err := sw.Swap(ctx, bucketBroker, createdKey, b, v); !errors.Is(err, store.ErrChanged) {
			return storeError(err)
		}
	}
	return NewError(CodeStoreUnavailable, "the latest account creation time the store keeps changed %d times while it was read (accounts created on other nodes); retry", createdTries)
}
