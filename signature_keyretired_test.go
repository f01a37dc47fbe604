package pigeon_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/seal"
	"pigeon/store/memory"
)

// TestRetiredKeyStaysWithItsAccount: a key an account stops publishing
// (it rotates it out, or the account is deleted) still made signatures
// and sealed payloads that name no account. Were another account free to
// list it then, it could republish every message the key signed as its
// own (the broker stamps it as the source, the signature verifies against
// its keys) and every payload the key sealed would open as sealed by it.
// So a key stays reserved to the account that published it: that account
// may list it again, no other may.
func TestRetiredKeyStaysWithItsAccount(t *testing.T) {
	tests := []struct {
		name   string
		retire func(t *testing.T, f *fixture, keep pigeon.PublicKey)
	}{
		{"rotated out", func(t *testing.T, f *fixture, keep pigeon.PublicKey) {
			_, err := f.e.PutAccountKeys(ctx, signer, []pigeon.PublicKey{keep})
			require.NoError(t, err)
		}},
		{"all keys dropped", func(t *testing.T, f *fixture, _ pigeon.PublicKey) {
			_, err := f.e.PutAccountKeys(ctx, signer, nil)
			require.NoError(t, err)
		}},
		{"account deleted", func(t *testing.T, f *fixture, _ pigeon.PublicKey) {
			require.NoError(t, f.e.DeleteAccount(ctx, signer))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := integrityFixture(t)
			for _, id := range []string{signer, copycat} {
				_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: id})
				require.NoError(t, err)
			}
			alice, aliceSig, aliceEnc := accountKeys(t)
			_, nextSig, _ := accountKeys(t)
			mallory, _, _ := accountKeys(t)
			_, err := f.e.PutAccountKeys(ctx, signer, []pigeon.PublicKey{aliceSig, aliceEnc})
			require.NoError(t, err)

			// The signer publishes a signed message; the copycat reads it.
			m := &pigeon.Message{Type: "t", Subject: "signed.events", Intent: "tell", Data: []byte(`{"bid":100}`)}
			require.NoError(t, pigeon.SignMessage(m, alice.SigningKID, alice.SigningPrivate))
			stolen := *m

			tt.retire(t, f, nextSig)

			mine := pigeon.Ed25519PublicKey(mallory.SigningKID, mallory.SigningPublic)
			claims := []struct {
				name string
				keys []pigeon.PublicKey
			}{
				{"signing key under its kid", []pigeon.PublicKey{mine, aliceSig}},
				{"signing key under another kid", []pigeon.PublicKey{{KID: "sig-mine", Use: aliceSig.Use, Alg: aliceSig.Alg, Key: aliceSig.Key}}},
				{"encryption key", []pigeon.PublicKey{aliceEnc}},
			}
			for _, c := range claims {
				_, err := f.e.PutAccountKeys(ctx, copycat, c.keys)
				pe := requireCode(t, err, pigeon.CodeConflict)
				require.NotContains(t, pe.Error(), signer, "the owner is not named")
				_, err = f.e.CreateAccount(ctx, pigeon.Account{ID: "spiffe://sig/other", Keys: c.keys})
				requireCode(t, err, pigeon.CodeConflict)
			}
			keys, err := f.e.AccountKeys(ctx, copycat)
			require.NoError(t, err)
			require.Empty(t, keys, "nothing was published")

			// So the copycat cannot pass the signer's message off as its own.
			_, err = f.e.PutAccountKeys(ctx, copycat, []pigeon.PublicKey{mine})
			require.NoError(t, err)
			stolen.Signature = &pigeon.Signature{KID: "sig-mine", Alg: stolen.Signature.Alg, Sig: stolen.Signature.Sig}
			_, err = f.connect("copycat-token", "signed.events").Publish(ctx, &stolen)
			requireCode(t, err, pigeon.CodeSignatureInvalid)

			// The account that published the keys may list them again.
			if _, err := f.e.GetAccount(ctx, signer); err != nil {
				_, err = f.e.CreateAccount(ctx, pigeon.Account{ID: signer})
				require.NoError(t, err)
			}
			_, err = f.e.PutAccountKeys(ctx, signer, []pigeon.PublicKey{aliceSig, aliceEnc, nextSig})
			require.NoError(t, err)
		})
	}
}

// TestRetiredKeyReservationSurvivesRestart: the reservation of a retired
// key is kept in the store, not only in memory, so a restart (or a
// cluster node that reloads the directory) does not free it.
func TestRetiredKeyReservationSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	e, st := openDurable(t, dir, nil)
	_, aliceSig, _ := accountKeys(t)
	_, bobSig, _ := accountKeys(t)
	_, err := e.CreateAccount(ctx, pigeon.Account{ID: "spiffe://a", Keys: []pigeon.PublicKey{aliceSig}})
	require.NoError(t, err)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: "spiffe://b", Keys: []pigeon.PublicKey{bobSig}})
	require.NoError(t, err)
	_, err = e.PutAccountKeys(ctx, "spiffe://a", nil)
	require.NoError(t, err)
	require.NoError(t, e.DeleteAccount(ctx, "spiffe://b"))
	closeDurable(t, e, st)

	e, st = openDurable(t, dir, nil)
	defer closeDurable(t, e, st)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: "spiffe://m"})
	require.NoError(t, err)
	for _, k := range []pigeon.PublicKey{aliceSig, bobSig} {
		_, err = e.PutAccountKeys(ctx, "spiffe://m", []pigeon.PublicKey{k})
		requireCode(t, err, pigeon.CodeConflict)
	}
	_, err = e.PutAccountKeys(ctx, "spiffe://a", []pigeon.PublicKey{aliceSig})
	require.NoError(t, err, "the owner lists its key again")
}

// TestKeyOwnerIsTheStores: two brokers that share a store (a cluster)
// each keep the directory in memory and learn of the other's changes a
// little later. A key one of them just let an account publish is not yet
// in the other's memory; the record in the store still keeps it to its
// owner there.
func TestKeyOwnerIsTheStores(t *testing.T) {
	st := memory.New(nil)
	open := func() *pigeon.Engine {
		// No Cluster: b never hears of a's changes, as if they were just made.
		e, err := pigeon.New(ctx, &pigeon.Options{Store: nodeStore{Store: st, audit: memory.New(nil)}})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, e.Shutdown(ctx)) })
		return e
	}
	a, b := open(), open() // b loaded the directory before a's changes
	_, k, _ := accountKeys(t)
	_, err := a.CreateAccount(ctx, pigeon.Account{ID: "spiffe://a", Keys: []pigeon.PublicKey{k}})
	require.NoError(t, err)

	_, err = b.CreateAccount(ctx, pigeon.Account{ID: "spiffe://m", Keys: []pigeon.PublicKey{k}})
	requireCode(t, err, pigeon.CodeConflict)
	_, err = b.CreateAccount(ctx, pigeon.Account{ID: "spiffe://m"})
	require.NoError(t, err)
	_, err = b.PutAccountKeys(ctx, "spiffe://m", []pigeon.PublicKey{k})
	requireCode(t, err, pigeon.CodeConflict)
}

// accountKeys returns fresh keys for an account and the signing and
// encryption keys it publishes.
func accountKeys(t *testing.T) (k *seal.Keys, sig, enc pigeon.PublicKey) {
	t.Helper()
	k, err := seal.GenerateKeys()
	require.NoError(t, err)
	return k, pigeon.Ed25519PublicKey(k.SigningKID, k.SigningPublic), pigeon.X25519PublicKey(k.EncryptionKID, k.EncryptionPublic)
}
