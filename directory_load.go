package pigeon

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"time"
	"unicode/utf8"

	"pigeon/internal/jsontext"
	"pigeon/store"
)

// Reading the directory from its store: at start (load), and again when
// another node changed it (reload). Each record is checked again as the
// write path checked it, and none may grant more than the write path
// would have let it.

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
// permission with no subject, a subject longer than MaxEnvelopeField
// bytes or that is not UTF-8 text without control characters, no
// operations, more than MaxPermissionOperations of them, an unknown
// operation, or a selector that does not parse (the role loads without
// it), and a role's permissions past its first
// MaxRolePermissions (the role loads with those first ones, checked as
// above; the rest are not read, and one warning counts them); an
// account's key that PublicKey.Validate refuses (a weak key would let
// anyone sign as the account), that repeats an earlier key's kid, or that
// is past MaxAccountKeys (the account loads without it; the keys past the
// bound are one warning); and a grant that carries more than
// MaxPrincipalRoles roles, whose jti, account or roles are not valid ids,
// or whose expiry is not within MaxGrantTTL after its issue (its token is
// refused). Past a bound, a record costs its decoding and no more checks
// than one within it. Each of these was accepted by some earlier version
// of the broker under looser rules: skipping it only takes permissions
// away, so it does not keep the broker from starting. A revocation is
// kept whatever its key: it only refuses. An account holding more than
// MaxPrincipalRoles roles loads (its roles may deny, so skipping it could
// lift a deny); its principals are refused at authentication and its
// contracts at their next check (checkAccountRoles). The directory's
// quotas (directoryQuota) are not applied: a store that holds more
// accounts, roles or live grants of an account than them loads whole, and
// only the creation of one more is refused while it does.
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
	d.grantsOf = map[string]map[string]struct{}{}
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
			d.putGrant(g)
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
	perms := r.Permissions
	if len(perms) > MaxRolePermissions {
		// One warning for them all, and none of them read further.
		log.Warn("pigeon: a stored role holds more permissions than PutRole takes; it loads with the first of them, and the rest grant nothing",
			"role", r.Name, "permissions", len(perms), "kept", MaxRolePermissions)
		perms = perms[:MaxRolePermissions]
	}
	kept := make([]Permission, 0, len(perms))
	for i, p := range perms {
		if err := checkPermission(i, p); err != nil {
			log.Warn("pigeon: a stored role permission breaks the checks of PutRole (a selector that does not parse, a subject or operation that is not one, more operations than there are); it grants nothing",
				"role", r.Name, "permission", i, "subject", cutSubject(p.Subject), "err", err)
			continue
		}
		kept = append(kept, p)
	}
	r.Permissions = kept
	return &r, nil
}

// cutSubject is subject as a warning names it: whole up to
// MaxEnvelopeField bytes (the longest checkPermission takes), its first
// MaxEnvelopeField bytes and "…" after them otherwise.
func cutSubject(subject string) string {
	if len(subject) <= MaxEnvelopeField {
		return subject
	}
	return subject[:MaxEnvelopeField] + "…"
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
// at most MaxAccountKeys. Each key left out before MaxAccountKeys are
// kept is logged; the keys after them, all left out, are logged once
// together, and not read.
func storedKeys(log *slog.Logger, id string, keys []PublicKey) []PublicKey {
	var out []PublicKey
	for i, k := range keys {
		if len(out) == MaxAccountKeys {
			log.Warn("pigeon: a stored account lists more keys than PutAccountKeys takes; the account loads without the keys after the first it takes",
				"account", id, "keys", len(keys), "skipped", len(keys)-i, "err", NewError(CodeInvalidArgument, "an account publishes at most %d keys", MaxAccountKeys))
			break
		}
		err := k.Validate()
		switch {
		case err != nil:
		case slices.ContainsFunc(out, func(o PublicKey) bool { return o.KID == k.KID }):
			err = NewError(CodeInvalidArgument, "kid %q appears twice", k.KID)
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
// is listed and shown as it is defined. It is at most MaxEnvelopeField
// bytes, the longest subject a message names (INVALID_ARGUMENT otherwise,
// not quoted): every node keeps every role, and a longer subject is one
// no message is ever published on.
func checkPermission(i int, p Permission) error {
	if p.Subject == "" {
		return NewError(CodeBadRequest, "permissions[%d]: subject is required", i)
	}
	if n := len(p.Subject); n > MaxEnvelopeField {
		return NewError(CodeInvalidArgument, "permissions[%d]: a subject is at most %d bytes, not %d", i, MaxEnvelopeField, n)
	}
	if !utf8.ValidString(p.Subject) || hasControl(p.Subject) {
		return NewError(CodeBadRequest, "permissions[%d]: subject %q is not UTF-8 text without control or formatting characters", i, p.Subject)
	}
	if len(p.Operations) == 0 {
		return NewError(CodeBadRequest, "permissions[%d]: operations are required", i)
	}
	if n := len(p.Operations); n > MaxPermissionOperations {
		return NewError(CodeInvalidArgument, "permissions[%d]: a permission lists at most %d operations, each once, not %d", i, MaxPermissionOperations, n)
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
// it: it carries at most MaxPrincipalRoles roles, its jti, account and
// roles are valid ids (it may have no role left: RemoveAccountRole takes
// roles from grants), and it expires after its issue, at most MaxGrantTTL
// later.
func checkStoredGrant(g *grantRecord) error {
	if n := len(g.Roles); n > MaxPrincipalRoles {
		// Counted before the names are read.
		return NewError(CodeInvalidArgument, "a grant carries at most %d roles, not %d", MaxPrincipalRoles, n)
	}
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
