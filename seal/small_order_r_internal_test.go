package seal

import (
	"crypto/ed25519"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/internal/edtest"
)

// TestOpenRefusesSmallOrderR: a sender re-signed its own sealed payload
// with R, the first half of the signature, the identity point.
// crypto/ed25519 (and the TypeScript client) accept it; libsodium (the
// Python client) and ed25519-dalek's verify_strict (the Rust client)
// refuse it, so one payload opened for some recipients and not others.
func TestOpenRefusesSmallOrderR(t *testing.T) {
	seed := make([]byte, ed25519.SeedSize)
	seed[0] = 7
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	bob, err := GenerateKeys()
	require.NoError(t, err)
	s, err := Seal([]byte("hello bob"), bob.EncryptionKID, bob.EncryptionPublic, "sig-alice", priv)
	require.NoError(t, err)
	pt, err := Open(s, bob.EncryptionPrivate, pub)
	require.NoError(t, err)
	require.Equal(t, "hello bob", string(pt))

	f, err := s.decode()
	require.NoError(t, err)
	signed := append(header(s.RecipientKID, s.SenderKID, bob.EncryptionPublic, pub, f.eph, f.nonce, 0), f.ct...)
	sig := edtest.SignWithIdentityR(seed, signed)
	require.True(t, ed25519.Verify(pub, signed, sig), "crypto/ed25519 accepts it")
	s.Sig = enc.EncodeToString(sig)
	require.NoError(t, s.Validate(), "its shape is a sealed object's")

	pt, err = Open(s, bob.EncryptionPrivate, pub)
	require.ErrorIs(t, err, ErrTampered)
	require.Nil(t, pt)
}
