package seal_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/seal"
)

// TestOpenDataRefusesAmbiguousSealedPart: encoding/json matches member
// names without regard to case and keeps the last of two equal names, while
// other readers (the Python and TypeScript clients, a JCS verifier) take
// names exactly. A sender that put a second sealed payload under "Ciphertext",
// "NONCE"… beside the first would have Go recipients open one plaintext and
// other recipients another, from one signed message; so would two "sealed"
// members. OpenData opens only data whose member names are unique, with a
// sealed part whose names are exact.
func TestOpenDataRefusesAmbiguousSealedPart(t *testing.T) {
	alice, bob := keys(t), keys(t)
	seal1, err := seal.Seal([]byte("pay carol"), bob.EncryptionKID, bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate)
	require.NoError(t, err)
	seal2, err := seal.Seal([]byte("pay mallory"), bob.EncryptionKID, bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate)
	require.NoError(t, err)
	b1, err := json.Marshal(seal1)
	require.NoError(t, err)
	// seal2's varying fields under other spellings of their names.
	second := `,"EphemeralKey":"` + seal2.EphemeralKey + `","Nonce":"` + seal2.Nonce + `","Ciphertext":"` + seal2.Ciphertext + `","Sig":"` + seal2.Sig + `"`
	exact := string(b1)
	b2, err := json.Marshal(seal2)
	require.NoError(t, err)
	dup := `,"ephemeralKey":"` + seal2.EphemeralKey + `","nonce":"` + seal2.Nonce + `","ciphertext":"` + seal2.Ciphertext + `","sig":"` + seal2.Sig + `"`

	tests := []struct {
		name, sealed string
		data         string // when set, the whole data
	}{
		{"second payload under capitalised names", exact[:len(exact)-1] + second + "}", ""},
		{"a member in upper case", strings.Replace(exact, `"sig":`, `"SIG":`, 1), ""},
		{"second payload under the same names", exact[:len(exact)-1] + dup + "}", ""},
		{"second sealed part", "", `{"room":"lobby","sealed":` + exact + `,"sealed":` + string(b2) + `}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := json.RawMessage(`{"room":"lobby","sealed":` + tt.sealed + `}`)
			if tt.data != "" {
				data = json.RawMessage(tt.data)
			}
			_, payload, err := seal.OpenData(data, bob.EncryptionPrivate, alice.SigningPublic)
			require.ErrorIs(t, err, seal.ErrTampered)
			require.Nil(t, payload)
			s, err := seal.ReadSealed(data)
			require.ErrorIs(t, err, seal.ErrTampered, "ReadSealed reads as OpenData does")
			require.Nil(t, s)
		})
	}

	// The exact form opens.
	_, payload, err := seal.OpenData(json.RawMessage(`{"room":"lobby","sealed":`+exact+`}`), bob.EncryptionPrivate, alice.SigningPublic)
	require.NoError(t, err)
	require.Equal(t, "pay carol", string(payload))
}

// ReadSealed tells a recipient which keys a sealed part names before it
// opens it: the recipient's encryption key (another's: not for it) and the
// sender's signing key, which may be an older one than the sender's newest.
func TestReadSealedNamesTheKeys(t *testing.T) {
	alice, bob := keys(t), keys(t)
	data, err := seal.SealData(map[string]any{"room": "lobby"}, []byte("hi"), bob.EncryptionKID, bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate)
	require.NoError(t, err)
	s, err := seal.ReadSealed(data)
	require.NoError(t, err)
	require.Equal(t, bob.EncryptionKID, s.RecipientKID)
	require.Equal(t, alice.SigningKID, s.SenderKID)
	opened, err := seal.Open(s, bob.EncryptionPrivate, alice.SigningPublic)
	require.NoError(t, err)
	require.Equal(t, "hi", string(opened))

	_, err = seal.ReadSealed(json.RawMessage(`{"room":"lobby"}`))
	require.ErrorIs(t, err, seal.ErrNotSealed)
	_, err = seal.ReadSealed(json.RawMessage(`[1]`))
	require.Error(t, err)
}
