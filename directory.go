package pigeon

import (
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"pigeon/internal/sortedkeys"
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
// directory*.go reads its maps. Every change bumps the version; a contract
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
	// shared is set when the store is shared with other nodes (the
	// engine's Options.Cluster): a change of an account then sweeps the
	// store for grants another node issued to it (sweepGrants). A node
	// alone holds every grant in its copy already.
	shared bool
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
	// grantsOf indexes grants by account id: the jtis of the grants
	// issued to each (putGrant, dropGrant; read builds it, and takeRead
	// puts it in place with the grants), so that counting an account's
	// live grants (grantQuota), deleting an account and taking a role
	// from one (grantsOfAccount) read its grants alone. Every grant of
	// d.grants is in it under its account, and nothing else: a grant
	// replaced in d.grants is replaced by one of the same account.
	grantsOf map[string]map[string]struct{}
	// quota caps what the directory holds (Options.MaxAccounts, MaxRoles,
	// MaxGrantsPerAccount): see directoryQuota.
	quota directoryQuota
	// accountIndex and roleIndex keep the ids of accounts and the names of
	// roles in order, for their pages (pageOf): a change that adds a key
	// to one of the maps or removes one tells it (Changed); one that
	// replaces the maps resets them (resetPages).
	accountIndex sortedkeys.Index[*Account]
	roleIndex    sortedkeys.Index[*Role]
	// keyOwner maps each published public key (its base64url text, one
	// spelling per key) to the account that publishes it. A key belongs to
	// one account only: another account that listed it would have every
	// signature the key makes verify as its own (see claimKeys).
	keyOwner map[string]string
	// created is the latest CreatedAt of an account this directory has
	// held (a deleted one included): createAccount stamps a new account
	// after it, and after the latest the store keeps (stampCreated: an
	// account deleted before this node read the directory, on a node whose
	// clock ran ahead), so that an account deleted and created again under
	// its id is still told from its predecessor by CreatedAt, as
	// contracts and grants tell their account.
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
