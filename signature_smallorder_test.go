package pigeon_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/edtest"
)

// TestSignatureWithSmallOrderRIsRefused: a signer chose R, the first half
// of its signature, as the identity point. crypto/ed25519 (and the
// TypeScript client) accept such a signature; libsodium (the Python
// client) and ed25519-dalek's verify_strict (the Rust client) refuse it.
// The gate admitted messages that receivers in Python and Rust reject.
func TestSignatureWithSmallOrderRIsRefused(t *testing.T) {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(i)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	m := exampleMessage()
	in, err := pigeon.CanonicalSigningInput(m)
	require.NoError(t, err)
	sig := edtest.SignWithIdentityR(seed, in)
	require.True(t, ed25519.Verify(pub, in, sig), "crypto/ed25519 accepts it")
	m.Signature = &pigeon.Signature{KID: "sig-1", Alg: pigeon.AlgEd25519, Sig: base64.RawURLEncoding.EncodeToString(sig), V: pigeon.SignatureV2}

	err = pigeon.VerifyMessage(m, pub)
	require.Equal(t, pigeon.CodeSignatureInvalid, pigeon.ErrorCode(err), "%v", err)
	err = pigeon.VerifyMessageWithKeys(m, []pigeon.PublicKey{pigeon.Ed25519PublicKey("sig-1", pub)})
	require.Equal(t, pigeon.CodeSignatureInvalid, pigeon.ErrorCode(err), "%v", err)

	// The signer's own signature of the same message still verifies.
	require.NoError(t, pigeon.SignMessage(m, "sig-1", priv))
	require.NoError(t, pigeon.VerifyMessage(m, pub))
}
