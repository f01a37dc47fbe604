package seal_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/seal"
)

// TestSealRefusesNonCanonicalRecipientKey: X25519 ignores the top bit of a
// public key, so a recipient key with it set is another spelling of the
// same key; the header and the key derivation bind the bytes as given and
// Open binds the recipient's own (canonical) ones, so what is sealed for
// the other spelling never opens. Seal refuses it rather than lose the
// payload.
func TestSealRefusesNonCanonicalRecipientKey(t *testing.T) {
	alice, bob := keys(t), keys(t)
	pub := append([]byte(nil), bob.EncryptionPublic...)
	pub[31] |= 0x80
	require.True(t, seal.WeakEncryptionKey(pub))
	require.False(t, seal.WeakEncryptionKey(bob.EncryptionPublic))

	s, err := seal.Seal([]byte("hello"), bob.EncryptionKID, pub, alice.SigningKID, alice.SigningPrivate)
	require.ErrorContains(t, err, "canonical")
	require.Nil(t, s)
}
