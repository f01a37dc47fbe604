package pigeon_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// ownedKey is a signing key of its own, as an account publishes it.
func ownedKey(t *testing.T, kid string, seed byte) pigeon.PublicKey {
	t.Helper()
	s := make([]byte, ed25519.SeedSize)
	s[0] = seed
	return pigeon.Ed25519PublicKey(kid, ed25519.NewKeyFromSeed(s).Public().(ed25519.PublicKey))
}

// TestDirectoryLoadRefusesKeyOwnersNoBrokerWrites: a record of a key's
// owner (keys.owners) keeps the key from every other account, so skipping
// one could let another account publish the key and sign as its owner.
// One that reserveKeys would not have written stops the start with
// STORE_CORRUPT, as an account or a revocation that does not decode does:
// a value that does not decode one way only (a member twice, in another
// case, not UTF-8), that names no account id (none, a space, a control
// character), or a record under text that is no public key's one
// spelling. A record as the broker writes it loads, the account it names
// gone or not. Before, the directory read no key owner at load, and a
// claim read one with encoding/json, which kept the last of two members.
func TestDirectoryLoadRefusesKeyOwnersNoBrokerWrites(t *testing.T) {
	key := ownedKey(t, "sig-1", 1).Key
	raw, err := base64.RawURLEncoding.DecodeString(key)
	require.NoError(t, err)
	refused := []struct {
		name, key, value string
	}{
		{"a member twice", key, `{"account":"alice","account":"bob"}`},
		{"a member in another case", key, `{"Account":"bob"}`},
		{"a member in another case beside its own", key, `{"account":"alice","Account":"bob"}`},
		{"not JSON", key, `alice`},
		{"no account", key, `{}`},
		{"an empty account", key, `{"account":""}`},
		{"an account that is not an id", key, `{"account":"bad id"}`},
		{"a control character in the account", key, `{"account":"alice\u001b[2J"}`},
		{"U+202E in the account", key, `{"account":"ecila\u202e"}`},
		{"not UTF-8", key, "{\"account\":\"al\xffice\"}"},
		{"under no key", "not-a-key", `{"account":"alice"}`},
		{"under a padded spelling", key + "=", `{"account":"alice"}`},
		{"under the standard alphabet", base64.StdEncoding.EncodeToString(raw), `{"account":"alice"}`},
		{"under a key of 31 bytes", base64.RawURLEncoding.EncodeToString(raw[:31]), `{"account":"alice"}`},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			st := storeOf(t, storedRecord{"keys.owners", c.key, c.value})
			e, err := pigeon.New(ctx, &pigeon.Options{Store: st, Catalog: demo.Catalog(), Region: "uk"})
			if err == nil {
				_ = e.Shutdown(ctx)
			}
			pe := requireCode(t, err, pigeon.CodeStoreCorrupt)
			require.Contains(t, pe.Message, "keys.owners")
		})
	}

	t.Run("as the broker writes it", func(t *testing.T) {
		st := storeOf(t,
			storedRecord{"accounts", "bob", storedAccount("bob")},
			storedRecord{"keys.owners", key, `{"account":"alice"}`},
		)
		f := accessFixture(t, func(o *pigeon.Options) { o.Store = st })
		_, err := f.e.PutAccountKeys(ctx, "bob", []pigeon.PublicKey{ownedKey(t, "sig-1", 1)})
		requireCode(t, err, pigeon.CodeConflict)
	})
}

// TestKeyOwnerReadForAClaimAsAtLoad: a key's owner is read with the same
// checks when a claim consults it, after the start: a record that holds
// its member twice, written behind the broker's back once its owner has
// rotated the key out, refuses the claim (STORE_CORRUPT) rather than give
// the key to the account the last member names, and the next start
// refuses it too. Before, the claim read it with encoding/json, which
// kept the last member, and the other account published the key.
func TestKeyOwnerReadForAClaimAsAtLoad(t *testing.T) {
	st := storeOf(t)
	f := accessFixture(t, func(o *pigeon.Options) { o.Store = st })
	for _, id := range []string{carol, dave} {
		_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: id})
		require.NoError(t, err)
	}
	k := ownedKey(t, "sig-1", 2)
	_, err := f.e.PutAccountKeys(ctx, carol, []pigeon.PublicKey{k})
	require.NoError(t, err)
	_, err = f.e.PutAccountKeys(ctx, carol, nil)
	require.NoError(t, err, "carol rotates the key out: it stays hers")
	_, err = f.e.PutAccountKeys(ctx, dave, []pigeon.PublicKey{k})
	requireCode(t, err, pigeon.CodeConflict)

	require.NoError(t, st.Put(ctx, "keys.owners", k.Key, []byte(`{"account":`+quoteJSON(carol)+`,"account":`+quoteJSON(dave)+`}`)))
	_, err = f.e.PutAccountKeys(ctx, dave, []pigeon.PublicKey{k})
	requireCode(t, err, pigeon.CodeStoreCorrupt)
	keys, err := f.e.AccountKeys(ctx, dave)
	require.NoError(t, err)
	require.Empty(t, keys, "dave does not publish carol's key")

	e, err := pigeon.New(ctx, &pigeon.Options{Store: st, Catalog: demo.Catalog(), Region: "uk"})
	if err == nil {
		_ = e.Shutdown(ctx)
	}
	requireCode(t, err, pigeon.CodeStoreCorrupt)
}
