package pigeon_test

import (
	"crypto/ed25519"
	"crypto/sha512"
	"encoding/base64"
	"math/big"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// signWithIdentityR signs msg with seed's key as a signer who picks the
// nonce point R itself: R is the identity point (of order 1), and S =
// k·a mod L, so that [S]B = R + [k]A holds and crypto/ed25519 accepts the
// signature. An honest signer's R = [r]B is never of small order.
func signWithIdentityR(seed, msg []byte) []byte {
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	h := sha512.Sum512(seed)
	h[0] &= 248
	h[31] &= 127
	h[31] |= 64
	a := leInt(h[:32])
	r := append([]byte{1}, make([]byte, 31)...) // the identity point
	d := sha512.New()
	d.Write(r)
	d.Write(pub)
	d.Write(msg)
	l, _ := new(big.Int).SetString("7237005577332262213973186563042994240857116359379907606001950938285454250989", 10)
	k := new(big.Int).Mod(leInt(d.Sum(nil)), l)
	s := new(big.Int).Mod(new(big.Int).Mul(k, a), l)
	sb := s.FillBytes(make([]byte, 32))
	slices.Reverse(sb)
	return append(r, sb...)
}

func leInt(b []byte) *big.Int {
	be := slices.Clone(b)
	slices.Reverse(be)
	return new(big.Int).SetBytes(be)
}

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
	sig := signWithIdentityR(seed, in)
	require.True(t, ed25519.Verify(pub, in, sig), "crypto/ed25519 accepts it")
	m.Signature = &pigeon.Signature{KID: "sig-1", Alg: pigeon.AlgEd25519, Sig: base64.RawURLEncoding.EncodeToString(sig)}

	err = pigeon.VerifyMessage(m, pub)
	require.Equal(t, pigeon.CodeSignatureInvalid, pigeon.ErrorCode(err), "%v", err)
	err = pigeon.VerifyMessageWithKeys(m, []pigeon.PublicKey{pigeon.Ed25519PublicKey("sig-1", pub)})
	require.Equal(t, pigeon.CodeSignatureInvalid, pigeon.ErrorCode(err), "%v", err)

	// The signer's own signature of the same message still verifies.
	require.NoError(t, pigeon.SignMessage(m, "sig-1", priv))
	require.NoError(t, pigeon.VerifyMessage(m, pub))
}
