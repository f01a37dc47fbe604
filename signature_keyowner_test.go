package pigeon_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/seal"
)

// TestPublishedKeyHasOneOwner: a signature names a kid, not an account, so
// the account whose published keys verify it is taken for its author. An
// account that could list another account's public key would own every
// signature that key makes: it could republish the other's signed message
// as its own (the broker stamps it as the source and the signature verifies
// against its keys) and claim the other's sealed payloads.
func TestPublishedKeyHasOneOwner(t *testing.T) {
	f := integrityFixture(t)
	for _, id := range []string{signer, copycat} {
		_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: id})
		require.NoError(t, err)
	}
	alice, aliceSig, aliceEnc := accountKeys(t)
	mallory, _, _ := accountKeys(t)
	_, err := f.e.PutAccountKeys(ctx, signer, []pigeon.PublicKey{aliceSig, aliceEnc})
	require.NoError(t, err)

	// The signer publishes a payload sealed for carol, in a signed
	// message; the copycat reads it.
	carol, err := seal.GenerateKeys()
	require.NoError(t, err)
	data, err := seal.SealData(map[string]any{"room": "lobby"}, []byte("buy 100"), carol.EncryptionKID, carol.EncryptionPublic, alice.SigningKID, alice.SigningPrivate)
	require.NoError(t, err)
	m := &pigeon.Message{Type: "t", Subject: "signed.events", Intent: "tell", Data: data}
	require.NoError(t, pigeon.SignMessage(m, alice.SigningKID, alice.SigningPrivate))
	res, err := f.connect("signer-token", "signed.events").Publish(ctx, m)
	require.NoError(t, err)
	stolen := res.Message.Data

	mine := pigeon.Ed25519PublicKey(mallory.SigningKID, mallory.SigningPublic)
	tests := []struct {
		name string
		keys []pigeon.PublicKey
	}{
		{"the other's signing key under its kid", []pigeon.PublicKey{aliceSig}},
		{"the other's signing key under another kid", []pigeon.PublicKey{mine, {KID: "sig-mine", Use: aliceSig.Use, Alg: aliceSig.Alg, Key: aliceSig.Key}}},
		{"the other's encryption key", []pigeon.PublicKey{aliceEnc}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.e.PutAccountKeys(ctx, copycat, tt.keys)
			pe := requireCode(t, err, pigeon.CodeConflict)
			require.NotContains(t, pe.Error(), signer, "the owner is not named")
			keys, err := f.e.AccountKeys(ctx, copycat)
			require.NoError(t, err)
			require.Empty(t, keys, "nothing was published")
		})
	}

	// So the copycat cannot pass the signer's sealed payload off as its
	// own: it sends it in a message it signs with its own key, and carol,
	// who looks up the sealing key the payload names among the source's
	// published keys, finds none.
	_, err = f.e.PutAccountKeys(ctx, copycat, []pigeon.PublicKey{mine})
	require.NoError(t, err)
	fake := &pigeon.Message{Type: "t", Subject: "signed.events", Intent: "tell", Data: stolen}
	require.NoError(t, pigeon.SignMessage(fake, mallory.SigningKID, mallory.SigningPrivate))
	res, err = f.connect("copycat-token", "signed.events").Publish(ctx, fake)
	require.NoError(t, err)
	require.Equal(t, copycat, res.Message.Source)
	keys, err := f.e.AccountKeys(ctx, res.Message.Source)
	require.NoError(t, err)
	require.NoError(t, pigeon.VerifyMessageWithKeys(res.Message, keys))
	var part struct {
		Sealed seal.Sealed `json:"sealed"`
	}
	require.NoError(t, json.Unmarshal(res.Message.Data, &part))
	_, ok := pigeon.SelectKey(keys, part.Sealed.SenderKID, pigeon.UseSig, time.Now())
	require.False(t, ok, "the copycat lists no key that opens the signer's payload")
	for _, k := range keys {
		pub, err := k.Ed25519()
		require.NoError(t, err)
		_, _, err = seal.OpenData(res.Message.Data, carol.EncryptionPrivate, pub)
		require.ErrorIs(t, err, seal.ErrTampered)
	}

	// The owner republishes, rotates and renames its keys freely; a key it
	// drops stays its own (see TestRetiredKeyStaysWithItsAccount).
	renamed := aliceSig
	renamed.KID = "sig-renamed"
	_, err = f.e.PutAccountKeys(ctx, signer, []pigeon.PublicKey{aliceSig, aliceEnc})
	require.NoError(t, err)
	_, err = f.e.PutAccountKeys(ctx, signer, []pigeon.PublicKey{renamed})
	require.NoError(t, err)
	_, err = f.e.PutAccountKeys(ctx, copycat, []pigeon.PublicKey{mine, aliceEnc})
	requireCode(t, err, pigeon.CodeConflict)
	_, err = f.e.AddAccountRole(ctx, signer, "r")
	require.NoError(t, err, "an update that does not touch keys is not refused")
}

// TestCreateAccountValidatesKeys: keys given at creation obey the rules of
// PutAccountKeys: valid, at most MaxAccountKeys, and not another account's.
func TestCreateAccountValidatesKeys(t *testing.T) {
	f := integrityFixture(t)
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	taken := pigeon.Ed25519PublicKey("sig-1", pub)
	_, err = f.e.CreateAccount(ctx, pigeon.Account{ID: signer, Keys: []pigeon.PublicKey{taken}})
	require.NoError(t, err)

	many := make([]pigeon.PublicKey, pigeon.MaxAccountKeys+1)
	for i := range many {
		p, _, err := ed25519.GenerateKey(rand.Reader)
		require.NoError(t, err)
		many[i] = pigeon.Ed25519PublicKey("k"+strings.Repeat("x", i), p)
	}
	tests := []struct {
		name string
		keys []pigeon.PublicKey
		code pigeon.Code
	}{
		{"malformed key", []pigeon.PublicKey{{KID: "k", Use: "sig", Alg: "ed25519", Key: "AAAA"}}, pigeon.CodeBadRequest},
		{"wrong alg for use", []pigeon.PublicKey{{KID: "k", Use: "sig", Alg: "x25519", Key: taken.Key}}, pigeon.CodeBadRequest},
		{"too many keys", many, pigeon.CodeInvalidArgument},
		{"another account's key", []pigeon.PublicKey{taken}, pigeon.CodeConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: copycat, Keys: tt.keys})
			requireCode(t, err, tt.code)
			_, err = f.e.GetAccount(ctx, copycat)
			requireCode(t, err, pigeon.CodeNotFound)
		})
	}
}
