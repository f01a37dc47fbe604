package pigeon_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/seal"
)

// respell returns text with s inserted at i.
func respell(text string, i int, s string) string { return text[:i] + s + text[i:] }

// TestPublishedKeyHasOneSpelling: encoding/base64 skips CR and LF even in
// strict mode, so "AAAA\nAAAA…" decodes to the bytes of "AAAAAAAA…". Were
// such a text a valid key, the same public key would have many spellings,
// and the rule that a key has one owner (which compares the texts) would
// let an account list another's key: it would then own every signature
// that key makes. A key is published in its one spelling only.
func TestPublishedKeyHasOneSpelling(t *testing.T) {
	alice, err := seal.GenerateKeys()
	require.NoError(t, err)
	sig := pigeon.Ed25519PublicKey(alice.SigningKID, alice.SigningPublic)
	enc := pigeon.X25519PublicKey(alice.EncryptionKID, alice.EncryptionPublic)
	require.NoError(t, sig.Validate())
	require.NoError(t, enc.Validate())
	for _, k := range []pigeon.PublicKey{sig, enc} {
		for _, tt := range []struct {
			name string
			text string
		}{
			{"LF inside", respell(k.Key, 10, "\n")},
			{"CR LF inside", respell(k.Key, 20, "\r\n")},
			{"LF at the end", k.Key + "\n"},
			{"CR at the start", "\r" + k.Key},
			{"padded", k.Key + "="},
			{"space", respell(k.Key, 5, " ")},
		} {
			t.Run(k.Use+"/"+tt.name, func(t *testing.T) {
				r := k
				r.Key = tt.text
				requireCode(t, r.Validate(), pigeon.CodeInvalidArgument)
				if k.Use == pigeon.UseSig {
					_, err := r.Ed25519()
					requireCode(t, err, pigeon.CodeInvalidArgument)
				} else {
					_, err := r.X25519()
					requireCode(t, err, pigeon.CodeInvalidArgument)
				}
			})
		}
	}

	// A respelled key listed before this rule (read back from the store,
	// where nothing validates it again) verifies nothing.
	m := &pigeon.Message{Subject: "signed.events", Data: []byte(`{"bid":100}`)}
	require.NoError(t, pigeon.SignMessage(m, alice.SigningKID, alice.SigningPrivate))
	require.NoError(t, pigeon.VerifyMessageWithKeys(m, []pigeon.PublicKey{sig}))
	old := sig
	old.Key = respell(sig.Key, 10, "\n")
	requireCode(t, pigeon.VerifyMessageWithKeys(m, []pigeon.PublicKey{old}), pigeon.CodeSignatureInvalid)

	// End to end: the copycat cannot list the signer's key by respelling it.
	f := integrityFixture(t)
	for _, id := range []string{signer, copycat} {
		_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: id})
		require.NoError(t, err)
	}
	_, err = f.e.PutAccountKeys(ctx, signer, []pigeon.PublicKey{sig, enc})
	require.NoError(t, err)
	stolen := sig
	stolen.Key = respell(sig.Key, 10, "\n")
	_, err = f.e.PutAccountKeys(ctx, copycat, []pigeon.PublicKey{stolen})
	require.Error(t, err)
	keys, err := f.e.AccountKeys(ctx, copycat)
	require.NoError(t, err)
	require.Empty(t, keys)
}

// TestEncryptionGateRefusesRespelledSeal: the encryption gate reads the
// sealed part as receivers do, so a ciphertext with a line break in it,
// which Go's decoder used to read past and other clients refuse, is not
// admitted as a sealed object.
func TestEncryptionGateRefusesRespelledSeal(t *testing.T) {
	f := integrityFixture(t)
	alice, err := seal.GenerateKeys()
	require.NoError(t, err)
	bob, err := seal.GenerateKeys()
	require.NoError(t, err)
	data, err := seal.SealData(map[string]any{"kind": "chat", "room": "a"}, []byte("hello there"), bob.EncryptionKID, bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate)
	require.NoError(t, err)
	var d map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(data, &d))
	var s seal.Sealed
	require.NoError(t, json.Unmarshal(d[seal.Field], &s))
	sess := f.connect("signer-token", "secret.chat")
	publish := func(s seal.Sealed) error {
		raw, err := json.Marshal(s)
		require.NoError(t, err)
		d[seal.Field] = raw
		b, err := json.Marshal(d)
		require.NoError(t, err)
		_, err = sess.Publish(ctx, &pigeon.Message{Type: "t", Subject: "secret.chat", Intent: "tell", Data: b})
		return err
	}
	require.NoError(t, publish(s))
	s.Ciphertext = respell(s.Ciphertext, 4, "\n")
	requireCode(t, publish(s), pigeon.CodeEncryptionRequired)
}
