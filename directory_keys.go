package pigeon

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"

	"pigeon/store"
)

// The owners of published keys: a public key stays the account's that
// published it, for good (claimKeys), so that no other account can list
// it and sign as its owner.

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

// checkKeys checks keys, the keys an account is to publish, with
// ValidateKeys: more than MaxAccountKeys of them is INVALID_ARGUMENT, as
// every other count bound of the directory, and a key ValidateKeys
// refuses is BAD_REQUEST. The keys are counted before any is read.
func checkKeys(keys []PublicKey) error {
	if n := len(keys); n > MaxAccountKeys {
		return NewError(CodeInvalidArgument, "an account publishes at most %d keys, not %d", MaxAccountKeys, n)
	}
	if err := ValidateKeys(keys); err != nil {
		return WrapError(CodeBadRequest, err, "%v", err)
	}
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
