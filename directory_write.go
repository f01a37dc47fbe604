package pigeon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"

	"pigeon/store"
)

// A change of the directory is made from this node's copy of it, and in a
// cluster that copy may be behind a change another node made a moment
// ago: the other node's notice (ChangeDirectory) is still on its way. A
// change written from such a copy as a whole record would undo the other
// node's: give back a role it removed, write back an account it deleted,
// or a grant it revoked and forgot. So every record the directory writes
// is written only if the store still holds what this node's copy says:
// the change reads the record (find), compares it with its copy as load
// would read it (canonical), and writes it with store.KVSwapper from the
// bytes it read (replace), which the store refuses if another node wrote
// the record in between. A record found changed is errStale: the change
// reads the directory again (refresh) and is made once more on what it
// read (fresh), where the other node's change is in force; found changed
// again, it is refused, retryable (errBehind). A store without
// store.KVSwapper (a third party's) is written as before, with a plain Put
// or Delete: the later write wins.

// errStale is what a change meets when the store holds, under a record it
// changes, other than this node's copy: another node changed the record
// since this node read the directory. fresh handles it.
var errStale = errors.New("pigeon: a directory record was changed on another node")

// found is what a change found stored under a record it changes: the
// bytes replace writes from.
type found struct {
	bucket, key string
	old         []byte // nil: no record
	sw          store.KVSwapper
}

// find reads bucket/key, which this node's copy holds as was (nil: no
// record), and returns what replace needs to write it only if it stays as
// read. It is errStale when the store holds other than was, as load would
// read it (a record load skips counts as none, and one it refuses as
// changed, which refresh then refuses). With a store that cannot swap it
// reads nothing. d.mu is held for writing.
func (d *directory) find(ctx context.Context, bucket, key string, was any) (found, error) {
	f := found{bucket: bucket, key: key}
	sw, ok := d.st.(store.KVSwapper)
	if !ok {
		return f, nil
	}
	f.sw = sw
	b, err := d.st.Get(ctx, bucket, key)
	if errors.Is(err, store.ErrNotFound) {
		b, err = nil, nil
	}
	if err != nil {
		return found{}, storeError(err)
	}
	got, err := canonical(bucket, key, b)
	if err != nil {
		return found{}, errStale
	}
	var want []byte
	if was != nil {
		if want, err = json.Marshal(was); err != nil {
			return found{}, WrapError(CodeInternal, err, "encode %s", bucket)
		}
	}
	if (got == nil) != (want == nil) || !bytes.Equal(got, want) {
		return found{}, errStale
	}
	f.old = b
	return f, nil
}

// replace writes v (nil: deletes the record) where f was found, only if
// the store holds there what find read (errStale otherwise). With a store
// that cannot swap it puts or deletes.
func (d *directory) replace(ctx context.Context, f found, v any) error {
	var val []byte
	if v != nil {
		var err error
		if val, err = json.Marshal(v); err != nil {
			return WrapError(CodeInternal, err, "encode %s", f.bucket)
		}
	}
	switch {
	case f.sw != nil:
		err := f.sw.Swap(ctx, f.bucket, f.key, f.old, val)
		if errors.Is(err, store.ErrChanged) {
			return errStale
		}
		return storeError(err)
	case v == nil:
		return storeError(d.st.Delete(ctx, f.bucket, f.key))
	default:
		return storeError(d.st.Put(ctx, f.bucket, f.key, val))
	}
}

// write changes bucket/key from was, as this node's copy holds it (nil:
// no record), to v (nil: deletes it): find, then replace.
func (d *directory) write(ctx context.Context, bucket, key string, was, v any) error {
	f, err := d.find(ctx, bucket, key, was)
	if err != nil {
		return err
	}
	return d.replace(ctx, f, v)
}

// absent answers a change of bucket/key that this node's copy does not
// hold (or holds as was, another than the one the change is for: nil
// when it holds none) with notFound, once it looked in the store: a
// record another node wrote since this node read the directory is
// errStale, which fresh answers by reading the directory again and
// making the change on what it read, so that a role, account or grant
// created elsewhere a moment ago can be deleted, changed or revoked here
// at once, not only once this node is told of it. While the directory is
// behind it answers errBehind without looking. A store that cannot swap
// is not looked in (see find). A key that no record can have (absentKey)
// is answered without a look, behind or not: a made-up id of any length
// costs no read. d.mu is held for writing, or not at all: it reads the
// store alone.
func (d *directory) absent(ctx context.Context, bucket, key string, was any, notFound error) error {
	if absentKey(key) {
		return notFound
	}
	if d.isBehind() {
		return errBehind()
	}
	if _, err := d.find(ctx, bucket, key, was); err != nil {
		return err
	}
	return notFound
}

// absentKey reports whether key is one no record can have: an account
// id, role name or grant id validID refuses. CreateAccount and PutRole
// refuse such a key, load skips one stored behind the broker's back, and
// the broker makes grant ids itself, so the store holds none to find: a
// change of it is notFound at once, as GetAccount and GetRole answer it.
func absentKey(key string) bool {
	return validID("an id", key) != nil
}

// none is p, or an untyped nil for a nil p: what find and write take for
// a record this node's copy does not hold.
func none[T any](p *T) any {
	if p == nil {
		return nil
	}
	return p
}

// logger is the logger of the directory's warnings: its log, the default
// one when it has none (a directory not loaded by an engine).
func (d *directory) logger() *slog.Logger {
	if d.log == nil {
		return slog.Default()
	}
	return d.log
}

// quiet takes the warnings of records read to compare them: load logged
// each when it read the record.
var quiet = slog.New(slog.DiscardHandler)

// canonical is b, the record under bucket/key (nil: none), as load reads
// it, encoded again as the directory encodes its copy: nil for none and
// for a record load skips; an error for one load refuses.
func canonical(bucket, key string, b []byte) ([]byte, error) {
	if b == nil {
		return nil, nil
	}
	var v any
	var err error
	switch bucket {
	case bucketAccounts:
		var a *Account
		a, err = loadAccount(quiet, key, b)
		v = none(a)
	case bucketRoles:
		var r *Role
		r, err = loadRole(quiet, key, b)
		v = none(r)
	case bucketGrants:
		var g *grantRecord
		g, err = loadGrant(quiet, key, b)
		v = none(g)
	case bucketRevoked:
		v, err = loadRevocation(b)
	default:
		return b, nil
	}
	if err != nil || v == nil {
		return nil, err
	}
	return json.Marshal(v)
}

// fresh runs change, a change of the directory that takes the lock
// itself. When change met a record another node changed (errStale), fresh
// reads the directory again (refresh) and runs change once more, on what
// it read: the other node's change stays, and this one is judged against
// it (an account deleted elsewhere is NOT_FOUND, one created elsewhere
// CONFLICT, a role given is given beside the roles the account holds
// now). Met again (the store changing as fast as this node reads it, or a
// replica that answered the read behind the record), the change is
// refused, retryable: errBehind. A change refused leaves written what it
// wrote before it met the record: each write only takes away (a grant
// narrowed or forgotten before its account) or is made again on the next
// try.
func (d *directory) fresh(ctx context.Context, change func() error) error {
	err := change()
	if !errors.Is(err, errStale) {
		return err
	}
	if err := d.refresh(ctx); err != nil {
		return err
	}
	if err = change(); errors.Is(err, errStale) {
		return errBehind()
	}
	return err
}

// refresh reads the directory again from its store, for a change that
// met a record another node changed, and puts what it read in place, as
// reload does (holding d.changing while it reads, so it never takes back
// a change of this node). Unlike reload, it leaves whether the directory
// is behind alone: a read that fails refuses the change, while the
// notice of the other node's change (ChangeDirectory) reloads the
// directory until it succeeds. Once in place, refreshed (the engine's:
// it wakes the subscriptions) is called, as after a reload.
func (d *directory) refresh(ctx context.Context) error {
	if err := func() error {
		d.changing.Lock()
		defer d.changing.Unlock()
		var fresh directory
		if err := fresh.read(ctx, d.st, d.logger()); err != nil {
			return err
		}
		d.takeRead(&fresh)
		return nil
	}(); err != nil {
		return err
	}
	if d.refreshed != nil {
		d.refreshed()
	}
	return nil
}

// takeRead puts in place what fresh read (read), and bumps the version.
// d.changing is held.
func (d *directory) takeRead(fresh *directory) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.accounts, d.roles, d.grants, d.revoked = fresh.accounts, fresh.roles, fresh.grants, fresh.revoked
	d.grantsOf = fresh.grantsOf
	d.resetPages()
	d.keyOwner = fresh.keyOwner
	if fresh.created.After(d.created) {
		d.created = fresh.created
	}
	d.bump()
}

// createKeyOwner records owner (encoded) for key in bucketKeyOwners if no
// account is recorded for it: store.ErrExists otherwise. A store that
// cannot create (store.KVCreator) nor swap (store.KVSwapper) puts it: the
// later write wins.
func (d *directory) createKeyOwner(ctx context.Context, key string, owner []byte) error {
	switch st := d.st.(type) {
	case store.KVCreator:
		return st.Create(ctx, bucketKeyOwners, key, owner)
	case store.KVSwapper:
		err := st.Swap(ctx, bucketKeyOwners, key, nil, owner)
		if errors.Is(err, store.ErrChanged) {
			return store.ErrExists
		}
		return err
	default:
		return d.st.Put(ctx, bucketKeyOwners, key, owner)
	}
}
