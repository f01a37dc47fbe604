package seal_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/seal"
)

// TestSealRefusesKIDThatIsNotUTF8: the header binds each kid's bytes, and
// a sealed object travels as JSON, which cannot carry invalid UTF-8:
// encoding/json writes U+FFFD in its place, so the recipient rebuilds
// another header and the payload never opens. The format says kids are
// UTF-8 (docs/security.md), as the other clients' string kids are; Seal
// refuses another kid rather than lose the payload, and Open refuses one
// as malformed.
func TestSealRefusesKIDThatIsNotUTF8(t *testing.T) {
	alice, bob := keys(t), keys(t)
	tests := []struct{ name, rkid, skid string }{
		{"recipient kid", "enc-\xff", alice.SigningKID},
		{"sender kid", bob.EncryptionKID, "sig-\xc3"},
		{"lone surrogate as UTF-8", "enc-\xed\xa0\x80", alice.SigningKID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := seal.Seal([]byte("secret"), tt.rkid, bob.EncryptionPublic, tt.skid, alice.SigningPrivate)
			require.ErrorContains(t, err, "UTF-8")
			require.Nil(t, s)

			// What the sender would have sent does not survive JSON.
			ok, err := seal.Seal([]byte("secret"), bob.EncryptionKID, bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate)
			require.NoError(t, err)
			ok.RecipientKID, ok.SenderKID = tt.rkid, tt.skid
			_, err = seal.Open(ok, bob.EncryptionPrivate, alice.SigningPublic)
			require.ErrorIs(t, err, seal.ErrTampered)
			b, err := json.Marshal(ok)
			require.NoError(t, err)
			var back seal.Sealed
			require.NoError(t, json.Unmarshal(b, &back))
			require.NotEqual(t, *ok, back, "JSON changed the kid")
		})
	}
}
