package seal

import (
	"crypto/ed25519"
	"crypto/sha512"
	"math/big"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// identityRSig signs msg with seed's key as a signer who picks the nonce
// point R itself: the identity point, with S = k·a mod L, which
// crypto/ed25519 accepts. An honest signer's R is never of small order.
func identityRSig(seed, msg []byte) []byte {
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	h := sha512.Sum512(seed)
	h[0] &= 248
	h[31] &= 127
	h[31] |= 64
	r := append([]byte{1}, make([]byte, 31)...)
	d := sha512.New()
	d.Write(r)
	d.Write(pub)
	d.Write(msg)
	l, _ := new(big.Int).SetString("7237005577332262213973186563042994240857116359379907606001950938285454250989", 10)
	k := new(big.Int).Mod(littleEndian(d.Sum(nil)), l)
	s := new(big.Int).Mod(new(big.Int).Mul(k, littleEndian(h[:32])), l)
	sb := s.FillBytes(make([]byte, 32))
	slices.Reverse(sb)
	return append(r, sb...)
}

func littleEndian(b []byte) *big.Int {
	be := slices.Clone(b)
	slices.Reverse(be)
	return new(big.Int).SetBytes(be)
}

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
	sig := identityRSig(seed, signed)
	require.True(t, ed25519.Verify(pub, signed, sig), "crypto/ed25519 accepts it")
	s.Sig = enc.EncodeToString(sig)
	require.NoError(t, s.Validate(), "its shape is a sealed object's")

	pt, err = Open(s, bob.EncryptionPrivate, pub)
	require.ErrorIs(t, err, ErrTampered)
	require.Nil(t, pt)
}
