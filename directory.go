package pigeon

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"pigeon/internal/firstn"
	"pigeon/internal/jsontext"
	"pigeon/store"
)

// KV buckets of the access directory.
const (
	bucketAccounts = "accounts"
	bucketRoles    = "roles"
	bucketGrants   = "grants"
	bucketRevoked  = "grants.revoked"
	bucketBroker   = "broker"
	// bucketKeyOwners holds, under each public key (its base64url text)
	// an account has published, that account: the key stays its own after
	// it stops listing it (see claimKeys).
	bucketKeyOwners = "keys.owners"
)

// directory holds accounts, roles, issued grants and grant revocations, and
// keeps them in the store's KV buckets. It owns its lock: nothing outside
// this file reads its maps. Every change bumps the version; a contract
// remembers the version it last checked, so the common path of an
// authorization check is one atomic load and one comparison.
//
// Accounts and roles in the maps are never changed in place: a change
// stores a new value, so a pointer handed out by lookup stays valid.
//
// A change persists to the store and updates the maps under the write lock;
// its then callback (an audit record, waking subscriptions) runs under the
// same lock, so that records of changes are written in the order of the
// changes.
type directory struct {
	st store.Store
	// log takes the warnings of a read of the store (load, refresh).
	log *slog.Logger
	// refreshed, when not nil, is called once a change that met a record
	// another node changed has read the directory again (refresh): the
	// engine wakes its subscriptions, as after a reload.
	refreshed func()
	// changing is held by a change for as long as d.mu, and by a reload
	// while it reads the store, which it does without d.mu: a reload's
	// read includes every change of this node, while authorizations go on
	// reading the maps (and a reload that hangs cannot hold them up).
	changing sync.Mutex
	mu       sync.RWMutex
	accounts map[string]*Account
	roles    map[string]*Role
	grants   map[string]*grantRecord
	revoked  map[string]time.Time
	// keyOwner maps each published public key (its base64url text, one
	// spelling per key) to the account that publishes it. A key belongs to
	// one account only: another account that listed it would have every
	// signature the key makes verify as its own (see claimKeys).
	keyOwner map[string]string
	// created is the latest CreatedAt of an account this directory has
	// held (a deleted one included): createAccount stamps a new account
	// after it, so that an account deleted and created again under its id
	// within one tick of the clock is still told from its predecessor by
	// CreatedAt, as contracts and grants tell their account.
	created time.Time
	ver     atomic.Uint64
	// behind is set while a change another node made has not been
	// applied here (a reload failed, or has run for directoryStaleAfter),
	// or may not have been heard of (see unheard): every authorization that consults the directory is refused
	// (errBehind) rather than judged on what may have been taken away
	// elsewhere. Written under staleMu, read without a lock.
	behind    atomic.Bool
	staleMu   sync.Mutex
	reloading bool // a reload is reading the store; under staleMu
	// failed, unheard: why behind is set (it is their union), under
	// staleMu. failed: a reload failed or hangs. unheard: the Cluster
	// (ClusterCurrent) no longer vouches that this node has heard every
	// change, heardUntil having passed; heardUntil is the latest moment
	// it vouched for.
	failed, unheard bool
	heardUntil      time.Time
}

// directoryStaleAfter bounds how long a reload of the directory (after
// another node changed it) may read the store before the directory counts
// as behind: a read that hangs (a store unreachable without an error, a
// request that waits for its own timeout) ends authorizing on the old
// directory after this long. A read that fails does so at once. It is
// well within the liveness bound after which a ClusterBarrier stops
// waiting for a node that does not confirm (store/jetstream: 3 s by
// default), so a revocation another node waited for is refused here
// before the other node could pass this one over as gone.
const directoryStaleAfter = time.Second

// lockChange locks d for a change; the returned func unlocks it.
func (d *directory) lockChange() func() {
	d.changing.Lock()
	d.mu.Lock()
	return func() {
		d.mu.Unlock()
		d.changing.Unlock()
	}
}

// errBehind is the refusal of an authorization, or of a change whose
// check reads the directory, while the directory is behind.
func errBehind() error { return NewError(CodeStoreUnavailable, behindText) }

// behindText is the text of errBehind, and of a contract's check refused
// while the directory is behind (a reload failed, or the node is no
// longer vouched for).
const behindText = "this node's access directory may be behind changes made on other nodes (it cannot read them, or can no longer be sure it has heard of them); retry later or on another node"

// isBehind reports whether the directory is behind another node's change.
func (d *directory) isBehind() bool { return d.behind.Load() }

// setBehind records whether a reload failed (or hangs), and reports
// whether that changed whether the directory is behind. staleMu is held.
func (d *directory) setBehind(failed bool) bool {
	d.failed = failed
	return d.settle()
}

// heard records until, the moment up to which the Cluster vouches that
// this node has heard every change of the others (ClusterCurrent; a
// moment that never moves back: the latest one seen counts), and makes
// the directory behind once it has passed. It returns how long from now
// it has left (none: behind), and whether it passed, or was renewed
// after it had, with this call.
func (d *directory) heard(until time.Time) (left time.Duration, changed bool) {
	d.staleMu.Lock()
	defer d.staleMu.Unlock()
	if until.After(d.heardUntil) {
		d.heardUntil = until
	}
	left = time.Until(d.heardUntil)
	changed = d.unheard != (left <= 0)
	d.unheard = left <= 0
	d.settle()
	return left, changed
}

// settle makes behind the union of its causes, and reports whether it
// changed. A change bumps the version, so that every contract's next
// check reads it. staleMu is held.
//
// Behind is published before the version is bumped, and a check passes
// on the result a contract's last check cached (checkAccess) only while
// the version is the one it was cached at and behind reads false: once
// behind is visible no check passes on a cached result, in the instant
// before the bump too. (The version alone could not close it in either
// order: bumped first, a check in between recomputes, reads behind still
// false and caches its result at the new version, which the version then
// vouches for once behind is set.) A result is cached only by a check
// that read behind false (effectiveRoles refuses otherwise) after it read
// the version: so none is cached, while the directory is behind, at a
// version read after behind was set. Catching up, behind is cleared
// before the bump: a check in between reads the directory as caught up
// (a reload put what it read in place, with a bump of its own, before it
// settles; a node vouched for again has heard every change), and the
// bump has every contract check again at the new version; a result
// cached before the directory fell behind carries a version at least two
// bumps old and is never taken again.
func (d *directory) settle() bool {
	behind := d.failed || d.unheard
	if d.behind.Load() == behind {
		return false
	}
	d.behind.Store(behind)
	d.bump()
	return true
}

// version is the directory's version: it changes whenever what any
// credential is worth may have changed.
func (d *directory) version() uint64 { return d.ver.Load() }

func (d *directory) bump() { d.ver.Add(1) }

// load reads the directory from st, which it keeps for later changes.
//
// A store is a file on disk or a bucket another node writes, so load
// checks each record again as the write path checked it, and never fails
// open: no record may grant more than the write path would have let it,
// and no revocation may be lost. What it finds is one of three kinds.
//
// It refuses to load (STORE_CORRUPT, naming the bucket and key) a record
// no broker writes, or one whose skipping could grant more: text that
// does not decode, or does not decode one way only (a member twice, a
// member spelt in another case than its field, not UTF-8: see
// decodeRecord); an account, role or grant stored under a key other than
// its id, name or jti (which would shadow the record of that id, or put
// two records under one id); an account with no createdAt, whose id or
// role names are not valid ids (validID), or whose attributes break
// validAttributes; and a revocation that does not decode, since skipping
// it would make a revoked grant good again. An account is refused rather
// than skipped because its roles and attributes can take access away (a
// catalog deny rule or a condition can name them), while its principal
// may still authenticate without it (a static token, OIDC, mTLS).
//
// It skips with a logged warning, as the write path would have refused
// it, what can only grant: a role whose name is not a valid id; a role
// permission with no subject, a subject that is not UTF-8 text without
// control characters, no operations, an unknown operation, or a selector
// that does not parse (the role loads without it); an account's key that
// PublicKey.Validate refuses (a weak key would let anyone sign as the
// account), that repeats an earlier key's kid, or that is past
// MaxAccountKeys (the account loads without it); and a grant whose jti,
// account or roles are not valid ids, or whose expiry
// is not within MaxGrantTTL after its issue. Each of these was accepted
// by some earlier version of the broker under looser rules: skipping it
// only takes permissions away, so it does not keep the broker from
// starting. A revocation is kept whatever its key: it only refuses. An
// account holding more than MaxPrincipalRoles roles loads (its roles may
// deny, so skipping it could lift a deny); its principals are refused at
// authentication and its contracts at their next check (checkAccountRoles).
//
// It also refuses (STORE_CORRUPT) a record of a key's owner
// (bucketKeyOwners) that reserveKeys would not have written: see
// checkKeyOwners. Such a record only refuses (it keeps a key from every
// other account), so skipping it could let another account publish the
// key and sign as its owner. Those records are read at load only, not at
// each reload: they are one per key ever published, and every one is
// checked again when it is read to decide a claim (storedKeyOwner).
func (d *directory) load(ctx context.Context, st store.Store, log *slog.Logger) error {
	d.log = log
	if err := d.read(ctx, st, log); err != nil {
		return err
	}
	return checkKeyOwners(ctx, st)
}

// read reads the accounts, roles, grants and revocations of st into d, as
// load describes, and keeps st for later changes.
func (d *directory) read(ctx context.Context, st store.Store, log *slog.Logger) error {
	d.st = st
	d.accounts, d.roles, d.grants, d.revoked = map[string]*Account{}, map[string]*Role{}, map[string]*grantRecord{}, map[string]time.Time{}
	d.keyOwner = map[string]string{}
	d.ver.Store(1)
	load := func(bucket string, fn func(k string, v []byte) error) error {
		kv, err := st.List(ctx, bucket)
		if err != nil {
			return storeError(err)
		}
		// In key order, so that which record a refusal names, and the
		// order of the warnings, does not change from one start to the next.
		for _, k := range slices.Sorted(maps.Keys(kv)) {
			if err := fn(k, kv[k]); err != nil {
				if ErrorCode(err) == CodeStoreCorrupt {
					return err
				}
				return WrapError(CodeStoreCorrupt, err, "%s/%q does not decode: %v", bucket, k, err)
			}
		}
		return nil
	}
	if err := load(bucketAccounts, func(k string, v []byte) error {
		a, err := loadAccount(log, k, v)
		if err != nil {
			return err
		}
		d.accounts[a.ID] = a
		d.indexKeys(a.ID, nil, a.Keys)
		if a.CreatedAt.After(d.created) {
			d.created = a.CreatedAt
		}
		return nil
	}); err != nil {
		return err
	}
	if err := load(bucketRoles, func(k string, v []byte) error {
		r, err := loadRole(log, k, v)
		if r != nil {
			d.roles[r.Name] = r
		}
		return err
	}); err != nil {
		return err
	}
	if err := load(bucketGrants, func(k string, v []byte) error {
		g, err := loadGrant(log, k, v)
		if g != nil {
			d.grants[g.JTI] = g
		}
		return err
	}); err != nil {
		return err
	}
	return load(bucketRevoked, func(k string, v []byte) error {
		t, err := loadRevocation(v)
		if err == nil {
			d.revoked[k] = t
		}
		return err
	})
}

// loadAccount reads v, stored under k in bucketAccounts, as load does:
// an error refuses it, and the account returned is without the keys load
// skips (logged to log).
func loadAccount(log *slog.Logger, k string, v []byte) (*Account, error) {
	var a Account
	if err := decodeRecord(v, &a); err != nil {
		return nil, err
	}
	if err := checkStoredAccount(k, &a); err != nil {
		return nil, WrapError(CodeStoreCorrupt, err, "%s/%q is not an account the broker would have stored: %v", bucketAccounts, k, err)
	}
	a.Keys = storedKeys(log, k, a.Keys)
	return &a, nil
}

// loadRole reads v, stored under k in bucketRoles, as load does: an error
// refuses it, a nil role (and no error) skips it, and the role returned
// is without the permissions load skips (each logged to log).
func loadRole(log *slog.Logger, k string, v []byte) (*Role, error) {
	var r Role
	if err := decodeRecord(v, &r); err != nil {
		return nil, err
	}
	if r.Name != k {
		return nil, NewError(CodeStoreCorrupt, "%s/%q holds the role %q: a role is stored under its name", bucketRoles, k, r.Name)
	}
	if err := validID("a role name", r.Name); err != nil {
		log.Warn("pigeon: a stored role's name is not a valid id; the role is skipped and grants nothing",
			"role", r.Name, "err", err)
		return nil, nil
	}
	kept := make([]Permission, 0, len(r.Permissions))
	for i, p := range r.Permissions {
		if err := checkPermission(i, p); err != nil {
			log.Warn("pigeon: a stored role permission breaks the checks of PutRole (a selector that does not parse, a subject or operation that is not one); it grants nothing",
				"role", r.Name, "permission", i, "subject", p.Subject, "err", err)
			continue
		}
		kept = append(kept, p)
	}
	r.Permissions = kept
	return &r, nil
}

// loadGrant reads v, stored under k in bucketGrants, as load does: an
// error refuses it, and a nil grant (and no error) skips it (logged to
// log).
func loadGrant(log *slog.Logger, k string, v []byte) (*grantRecord, error) {
	var g grantRecord
	if err := decodeRecord(v, &g); err != nil {
		return nil, err
	}
	if g.JTI != k {
		return nil, NewError(CodeStoreCorrupt, "%s/%q holds the grant %q: a grant is stored under its jti", bucketGrants, k, g.JTI)
	}
	if err := checkStoredGrant(&g); err != nil {
		log.Warn("pigeon: a stored grant breaks the checks of IssueGrant; it is skipped and its token is refused",
			"grant", g.JTI, "err", err)
		return nil, nil
	}
	return &g, nil
}

// loadRevocation reads v, a record of bucketRevoked: the expiry of the
// grant it revokes.
func loadRevocation(v []byte) (time.Time, error) {
	var t time.Time
	err := decodeRecord(v, &t)
	return t, err
}

// checkKeyOwners checks every record of bucketKeyOwners in st with
// decodeKeyOwner, in key order, and returns the first refusal
// (STORE_CORRUPT, naming the bucket and key).
func checkKeyOwners(ctx context.Context, st store.Store) error {
	kv, err := st.List(ctx, bucketKeyOwners)
	if err != nil {
		return storeError(err)
	}
	for _, k := range slices.Sorted(maps.Keys(kv)) {
		if _, err := decodeKeyOwner(k, kv[k]); err != nil {
			return err
		}
	}
	return nil
}

// decodeKeyOwner reads v, the record of bucketKeyOwners under key, as
// reserveKeys writes it: key is a public key's one spelling (the strict
// base64url of 32 bytes, as PublicKey.Validate takes it), and v decodes
// one way only (decodeRecord) to the id of the account that owns the key,
// a valid account id (validID: no control character, no space). Anything
// else is STORE_CORRUPT: the record was written behind the broker's
// back, and the key it reserves cannot be told.
func decodeKeyOwner(key string, v []byte) (string, error) {
	if b, err := keyEncoding.DecodeString(key); err != nil || len(b) != 32 || len(key) != keyEncoding.EncodedLen(32) {
		return "", NewError(CodeStoreCorrupt, "%s/%q is not under a public key's base64url: reserveKeys writes none such", bucketKeyOwners, key)
	}
	var r keyOwnerRecord
	if err := decodeRecord(v, &r); err != nil {
		return "", WrapError(CodeStoreCorrupt, err, "%s/%q does not decode: %v", bucketKeyOwners, key, err)
	}
	if err := validID("an account id", r.Account); err != nil {
		return "", WrapError(CodeStoreCorrupt, err, "%s/%q does not name an account: %v", bucketKeyOwners, key, err)
	}
	return r.Account, nil
}

// decodeRecord decodes the stored JSON record b into v, refusing text that
// a reader could take more than one way and that the broker never writes:
// text jsontext.Validate refuses (an object holding a member twice, of
// which encoding/json would keep the last; not UTF-8; nested too deep)
// and a member CheckNames refuses (spelt in another case than its field,
// "ID" for "id", which encoding/json takes for the field). A member the
// type does not know is ignored, as a field a later version adds.
func decodeRecord(b []byte, v any) error {
	if err := jsontext.Validate(b, edgeDepth); err != nil {
		return err
	}
	if err := CheckNames(b, v); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// checkStoredAccount checks account a, stored under key, as CreateAccount
// and the changes after it would have left it: its id is key and valid,
// its role names are valid, its attributes are within their bounds, and
// it has a creation time (which the grants and contracts of the account
// are told from a later account of its id by).
func checkStoredAccount(key string, a *Account) error {
	if a.ID != key {
		return NewError(CodeStoreCorrupt, "it holds the account %q: an account is stored under its id", a.ID)
	}
	if err := validID("an account id", a.ID); err != nil {
		return err
	}
	if err := validIDs("a role name", a.Roles); err != nil {
		return err
	}
	if err := validAttributes(a.Attributes); err != nil {
		return err
	}
	if a.CreatedAt.IsZero() {
		return NewError(CodeStoreCorrupt, "it has no createdAt")
	}
	return nil
}

// storedKeys returns the keys of account id that ValidateKeys would have
// let it publish: each key PublicKey.Validate accepts, the first of a kid,
// at most MaxAccountKeys. Each key left out is logged.
func storedKeys(log *slog.Logger, id string, keys []PublicKey) []PublicKey {
	var out []PublicKey
	for _, k := range keys {
		err := k.Validate()
		switch {
		case err != nil:
		case slices.ContainsFunc(out, func(o PublicKey) bool { return o.KID == k.KID }):
			err = NewError(CodeInvalidArgument, "kid %q appears twice", k.KID)
		case len(out) == MaxAccountKeys:
			err = NewError(CodeInvalidArgument, "an account publishes at most %d keys", MaxAccountKeys)
		}
		if err != nil {
			log.Warn("pigeon: a stored account key breaks the checks of PutAccountKeys; the account loads without it",
				"account", id, "kid", k.KID, "err", err)
			continue
		}
		out = append(out, k)
	}
	return out
}

// checkPermission checks permissions[i] of a role, for PutRole and for a
// role read from the store. A subject name is one line of text: the role
// is listed and shown as it is defined.
func checkPermission(i int, p Permission) error {
	if p.Subject == "" {
		return NewError(CodeBadRequest, "permissions[%d]: subject is required", i)
	}
	if !utf8.ValidString(p.Subject) || hasControl(p.Subject) {
		return NewError(CodeBadRequest, "permissions[%d]: subject %q is not UTF-8 text without control or formatting characters", i, p.Subject)
	}
	if len(p.Operations) == 0 {
		return NewError(CodeBadRequest, "permissions[%d]: operations are required", i)
	}
	for _, op := range p.Operations {
		if !validOperation(string(op)) {
			return NewError(CodeBadRequest, "permissions[%d]: unknown operation %q", i, op)
		}
	}
	if p.Selector != "" {
		if _, err := ParseSelector(p.Selector); err != nil {
			return err
		}
	}
	return nil
}

// checkStoredGrant checks a stored grant as IssueGrant would have issued
// it: its jti, account and roles are valid ids (it may have no role left:
// RemoveAccountRole takes roles from grants), and it
// expires after its issue, at most MaxGrantTTL later.
func checkStoredGrant(g *grantRecord) error {
	if err := validID("a grant id", g.JTI); err != nil {
		return err
	}
	if err := validID("an account id", g.Account); err != nil {
		return err
	}
	if err := validIDs("a role name", g.Roles); err != nil {
		return err
	}
	if !g.ExpiresAt.After(g.IssuedAt) || g.ExpiresAt.Sub(g.IssuedAt) > MaxGrantTTL {
		return NewError(CodeInvalidArgument, "a grant expires after its issue, at most %s later", MaxGrantTTL)
	}
	return nil
}

// reload reads the directory again from its store, where another node
// changed it, and bumps the version. It holds d.changing while it reads,
// as a change does while it persists: what it reads then includes every
// change of this node, so a reload never takes one back. It takes d.mu
// only to put what it read in place: authorizations read the old
// directory meanwhile.
//
// While another node's change is not applied, the directory is behind
// (see behind): from the moment a reload fails (the store unreachable,
// or a record load refuses as STORE_CORRUPT), or once one has read for
// directoryStaleAfter without an answer, until a reload succeeds. Each
// change of that state is reported to changed (from another goroutine
// for a reload that hangs) with the error that caused it (nil: caught up).
func (d *directory) reload(ctx context.Context, log *slog.Logger, changed func(behind bool, cause error)) (err error) {
	d.changing.Lock()
	defer d.changing.Unlock()
	d.staleMu.Lock()
	d.reloading = true
	d.staleMu.Unlock()
	slow := time.AfterFunc(directoryStaleAfter, func() {
		d.staleMu.Lock()
		flipped := d.reloading && d.setBehind(true)
		d.staleMu.Unlock()
		if flipped {
			changed(true, NewError(CodeStoreUnavailable, "reading the directory has taken over %s", directoryStaleAfter))
		}
	})
	defer slow.Stop()
	applied := false
	defer func() {
		// A read that panicked (a store of a third party; the caller
		// recovers it) is a failed read too.
		cause := err
		if !applied && cause == nil {
			cause = NewError(CodeStoreUnavailable, "reading the directory panicked")
		}
		d.staleMu.Lock()
		d.reloading = false
		flipped := d.setBehind(!applied)
		d.staleMu.Unlock()
		if flipped {
			changed(!applied, cause)
		}
	}()
	var fresh directory
	if err := fresh.read(ctx, d.st, log); err != nil {
		return err
	}
	d.takeRead(&fresh)
	applied = true
	return nil
}

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
// after the id after (every one after it when max <= 0), and whether
// another follows them (pageOf).
func (d *directory) accountPage(after string, max int) (page []Account, more bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return pageOf(d.accounts, after, max, cloneAccount)
}

// pageOf returns copies (clone) of the first max entries of m by key that
// sort after the key after (every one after it when max <= 0), and
// whether another follows them. It holds the page alone, not a copy of
// every entry (firstn), so a directory of a million accounts answers a
// page of ten in ten copies. The caller holds the directory's lock.
func pageOf[T any](m map[string]*T, after string, max int, clone func(*T) T) (page []T, more bool) {
	type keyed struct {
		key string
		v   *T
	}
	k := firstn.New(pageRoom(max, len(m)), func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	for key, v := range m {
		if key > after {
			k.Offer(keyed{key, v})
		}
	}
	kept := k.Sorted()
	if more = max > 0 && len(kept) > max; more {
		kept = kept[:max]
	}
	page = make([]T, len(kept))
	for i, e := range kept {
		page[i] = clone(e.v)
	}
	return page, more
}

// pageRoom is what a page of at most max entries (max <= 0: every one of
// all) keeps while it looks for them: one more than max, which tells
// whether another follows.
func pageRoom(max, all int) int {
	if max <= 0 || max >= all {
		return all
	}
	return max + 1
}

// createAccount adds account a (CONFLICT when its id exists, here or, in
// a store that can swap, on another node that created it since this node
// read the directory: see fresh), then calls then. a.CreatedAt, when not
// after every account's the directory has held, is moved a nanosecond
// past the latest (see created).
func (d *directory) createAccount(ctx context.Context, a *Account, then func()) error {
	return d.fresh(ctx, func() error { return d.createAccountOnce(ctx, a, then) })
}

func (d *directory) createAccountOnce(ctx context.Context, a *Account, then func()) error {
	defer d.lockChange()()
	if d.isBehind() {
		return errBehind() // the id may be taken, or a key claimed, on another node
	}
	if _, ok := d.accounts[a.ID]; ok {
		return NewError(CodeConflict, "account %s exists", a.ID)
	}
	if !a.CreatedAt.After(d.created) {
		a.CreatedAt = d.created.Add(time.Nanosecond)
	}
	if err := ValidateKeys(a.Keys); err != nil {
		return WrapError(CodeBadRequest, err, "%v", err)
	}
	// Looked up before the keys are reserved: an account another node
	// created since reserves none of them to its id.
	f, err := d.find(ctx, bucketAccounts, a.ID, nil)
	if err != nil {
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
		return Account{}, NewError(CodeNotFound, "no account %s", id)
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
// (and forgot its grants, revoked ones included) writes neither back.
func (d *directory) removeAccountRole(ctx context.Context, id, role string, then func()) (out Account, err error) {
	err = d.fresh(ctx, func() error {
		out, err = d.removeAccountRoleOnce(ctx, id, role, then)
		return err
	})
	return out, err
}

func (d *directory) removeAccountRoleOnce(ctx context.Context, id, role string, then func()) (Account, error) {
	defer d.lockChange()()
	if d.isBehind() {
		return Account{}, errBehind() // storing the old account would undo another node's change
	}
	cur, ok := d.accounts[id]
	if !ok {
		return Account{}, NewError(CodeNotFound, "no account %s", id)
	}
	f, err := d.find(ctx, bucketAccounts, id, cur)
	if err != nil {
		return Account{}, err
	}
	for jti, g := range d.grants {
		if g.Account != id || !slices.Contains(g.Roles, role) {
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
// the store still holds it as this node does (see fresh).
func (d *directory) deleteAccount(ctx context.Context, id string, then func()) error {
	return d.fresh(ctx, func() error { return d.deleteAccountOnce(ctx, id, then) })
}

func (d *directory) deleteAccountOnce(ctx context.Context, id string, then func()) error {
	defer d.lockChange()()
	cur, ok := d.accounts[id]
	if !ok {
		if d.isBehind() {
			return errBehind()
		}
		return NewError(CodeNotFound, "no account %s", id)
	}
	f, err := d.find(ctx, bucketAccounts, id, cur)
	if err != nil {
		return err
	}
	for jti, g := range d.grants {
		if g.Account != id {
			continue
		}
		if err := d.forgetGrant(ctx, jti, true); err != nil {
			return err
		}
	}
	if err := d.reserveKeys(ctx, id, cur.Keys, false); err != nil {
		return err
	}
	if err := d.replace(ctx, f, nil); err != nil {
		return err
	}
	d.indexKeys(id, d.accounts[id].Keys, nil)
	delete(d.accounts, id)
	d.bump()
	then()
	return nil
}

// claimKeys refuses (CONFLICT) to let account id publish keys that another
// account publishes or published. A signature names no account: whoever
// lists the public key it verifies with owns it. Were account B to list
// A's signing key, B could publish A's signed messages as its own (the
// broker stamps B as their source and they verify against B's keys), and
// a sealed payload A made would open as sealed by B. That stays true of
// what the key signed after A stops listing it (A rotates it out, or A is
// deleted), so a key stays A's for good: the store keeps its owner under
// bucketKeyOwners (see reserveKeys), where every node of a cluster and a
// restarted broker find it. Keys the account already listed (old) are not
// checked again, so changing an account's roles never fails on a key it
// published before this rule. The error does not name the other account.
// claimKeys writes nothing. d.mu is held for writing.
func (d *directory) claimKeys(ctx context.Context, id string, old, keys []PublicKey) error {
	for _, k := range keys {
		if hasKey(old, k.Key) {
			continue
		}
		owner, ok := d.keyOwner[k.Key]
		if !ok {
			var err error
			if owner, ok, err = d.storedKeyOwner(ctx, k.Key); err != nil {
				return err
			}
		}
		if ok && owner != id {
			return errKeyTaken(k)
		}
	}
	return nil
}

func errKeyTaken(k PublicKey) error {
	return NewError(CodeConflict, "key %q is published by another account", k.KID)
}

func hasKey(keys []PublicKey, key string) bool {
	return slices.ContainsFunc(keys, func(k PublicKey) bool { return k.Key == key })
}

// keyOwnerRecord is the value of a key in bucketKeyOwners.
type keyOwnerRecord struct {
	Account string `json:"account"`
}

// storedKeyOwner returns the account that published key, as the store
// has it: a record decodeKeyOwner refuses is STORE_CORRUPT, which refuses
// the claim it was read for.
func (d *directory) storedKeyOwner(ctx context.Context, key string) (string, bool, error) {
	v, err := d.st.Get(ctx, bucketKeyOwners, key)
	if errors.Is(err, store.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, storeError(err)
	}
	owner, err := decodeKeyOwner(key, v)
	if err != nil {
		return "", false, err
	}
	return owner, true, nil
}

// newKeys returns the keys of keys that old does not hold.
func newKeys(old, keys []PublicKey) []PublicKey {
	var out []PublicKey
	for _, k := range keys {
		if !hasKey(old, k.Key) {
			out = append(out, k)
		}
	}
	return out
}

// reserveKeys records in the store that account id owns each of keys that
// no account is recorded for: the keys it is about to list (listing, which
// claimKeys checked) or to drop (keys listed before this rule have no
// record yet). A store that several brokers share creates each record
// once (store.KVCreator), so that of two accounts that claim one key on
// two nodes at once, one gets CONFLICT (a store that can swap instead,
// store.KVSwapper, swaps from no value); in a store without either, the
// later write wins. It runs before the change is stored: should that
// fail, a key is reserved to an account that does not list it, which only
// that account could have wanted to list. Dropping a key never fails on
// its record. The store holds one small record per key ever published;
// memory holds none. d.mu is held for writing.
func (d *directory) reserveKeys(ctx context.Context, id string, keys []PublicKey, listing bool) error {
	for _, k := range keys {
		if o, ok := d.keyOwner[k.Key]; ok && o != id {
			continue // a key two accounts listed before this rule: not id's
		}
		owner, ok, err := d.storedKeyOwner(ctx, k.Key)
		if err != nil {
			return err
		}
		if !ok {
			b, err := json.Marshal(keyOwnerRecord{Account: id})
			if err != nil {
				return WrapError(CodeInternal, err, "encode %s", bucketKeyOwners)
			}
			err = d.createKeyOwner(ctx, k.Key, b)
			if !errors.Is(err, store.ErrExists) {
				if err := storeError(err); err != nil {
					return err
				}
				continue
			}
			// Another node recorded it since storedKeyOwner read.
			if owner, _, err = d.storedKeyOwner(ctx, k.Key); err != nil {
				return err
			}
		}
		if listing && owner != id {
			return errKeyTaken(k)
		}
	}
	return nil
}

// indexKeys records that account id publishes keys instead of old. A key
// another account holds is left to it. d.mu is held for writing (or d is
// not yet shared, while it loads).
func (d *directory) indexKeys(id string, old, keys []PublicKey) {
	for _, k := range old {
		if d.keyOwner[k.Key] == id {
			delete(d.keyOwner, k.Key)
		}
	}
	for _, k := range keys {
		if _, ok := d.keyOwner[k.Key]; !ok {
			d.keyOwner[k.Key] = id
		}
	}
}

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
// the name after (every one after it when max <= 0), and whether another
// follows them (pageOf).
func (d *directory) rolePage(after string, max int) (page []Role, more bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return pageOf(d.roles, after, max, func(r *Role) Role { return Role{Name: r.Name, Permissions: slices.Clone(r.Permissions)} })
}

// putRole defines or replaces role r, then calls then. It writes only
// over the definition this node holds, or where the store holds none when
// this node holds none (see fresh): a node not yet told of another node's
// change of the role (a redefinition, a deletion) reads the directory
// again, then puts the role as asked. A put is a whole definition, given
// by its caller, so the later put wins; a role deleted elsewhere is
// defined again only by a put of it, never written back by a change of
// something else.
func (d *directory) putRole(ctx context.Context, r *Role, then func()) error {
	return d.fresh(ctx, func() error { return d.putRoleOnce(ctx, r, then) })
}

func (d *directory) putRoleOnce(ctx context.Context, r *Role, then func()) error {
	defer d.lockChange()()
	if err := d.write(ctx, bucketRoles, r.Name, none(d.roles[r.Name]), r); err != nil {
		return err
	}
	d.roles[r.Name] = r
	d.bump()
	then()
	return nil
}

// deleteRole removes role name (NOT_FOUND otherwise, here or, once read
// again, in the store: see fresh), then calls then.
func (d *directory) deleteRole(ctx context.Context, name string, then func()) error {
	return d.fresh(ctx, func() error { return d.deleteRoleOnce(ctx, name, then) })
}

func (d *directory) deleteRoleOnce(ctx context.Context, name string, then func()) error {
	defer d.lockChange()()
	cur, ok := d.roles[name]
	if !ok {
		if d.isBehind() {
			return errBehind()
		}
		return NewError(CodeNotFound, "no role %s", name)
	}
	if err := d.write(ctx, bucketRoles, name, cur, nil); err != nil {
		return err
	}
	delete(d.roles, name)
	d.bump()
	then()
	return nil
}

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

// effectiveRoles is what a credential of principal is worth at now: the
// roles it carries (baseRoles) and its account's, or, for a grant token
// (grantID), the grant's roles that the account still holds. A revoked,
// expired or unknown grant, one issued to another account, or one whose
// account is gone, is worth nothing (GRANT_REVOKED). While the directory
// is behind another node's change, no credential is worth anything here
// (STORE_UNAVAILABLE): the change may have taken it away.
func (d *directory) effectiveRoles(principal string, baseRoles []string, grantID string, now time.Time) ([]string, Code) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.isBehind() {
		return nil, CodeStoreUnavailable
	}
	a := d.accounts[principal]
	if grantID != "" {
		g := d.grants[grantID]
		if _, revoked := d.revoked[grantID]; revoked || g == nil || a == nil || g.Account != principal || !now.Before(g.ExpiresAt) || !g.of(a) {
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

// permissionScope returns how the principal's roles grant op on subject:
// ok false when no permission does; scope nil when some permission grants
// it without a selector; otherwise the selectors that scope it. A
// permission whose selector does not parse (only a store written behind
// the broker's back holds one: PutRole refuses it) grants nothing, so it
// can never widen a scope to the whole subject. While the directory is
// behind another node's change, no role grants anything.
func (d *directory) permissionScope(roles []string, subject string, op Operation) (scope []Selector, ok bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.isBehind() {
		return nil, false
	}
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

func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return uniqueSorted(out)
}
