package seal

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"testing"

	"github.com/stretchr/testify/require"
)

// smallOrderKeys returns the fourteen encodings of small-order Ed25519
// points that crypto/ed25519 accepts: each entry of the table, with and
// without the sign bit.
func smallOrderKeys() [][]byte {
	var out [][]byte
	for _, w := range smallOrderEd25519 {
		a, b := w, w
		b[31] |= 0x80
		out = append(out, a[:], b[:])
	}
	return out
}

// forgeSealed seals plaintext for the recipient as if the holder of weak
// had, without any private key: under a point of small order the
// signature "identity point, scalar 0" verifies whenever the challenge is a
// multiple of the point's order, which a few fresh nonces reach.
func forgeSealed(t *testing.T, weak []byte, recipientKID string, recipientPub, plaintext []byte) *Sealed {
	t.Helper()
	recipient, err := ecdh.X25519().NewPublicKey(recipientPub)
	require.NoError(t, err)
	sig := make([]byte, ed25519.SignatureSize)
	sig[0] = 1 // R = the identity point, S = 0
	for range 256 {
		eph, err := ecdh.X25519().GenerateKey(rand.Reader)
		require.NoError(t, err)
		shared, err := eph.ECDH(recipient)
		require.NoError(t, err)
		var nonce [NonceSize]byte
		_, _ = rand.Read(nonce[:])
		ephPub := eph.PublicKey().Bytes()
		aead, err := payloadAEAD(shared, ephPub, recipientPub)
		require.NoError(t, err)
		h := header(recipientKID, "sig-weak", recipientPub, weak, ephPub, nonce[:], len(plaintext)+Overhead)
		signed := aead.Seal(h, nonce[:], plaintext, h)
		if !ed25519.Verify(weak, signed, sig) {
			continue
		}
		return &Sealed{V: Version, Alg: Alg, RecipientKID: recipientKID, SenderKID: "sig-weak",
			EphemeralKey: enc.EncodeToString(ephPub), Nonce: enc.EncodeToString(nonce[:]),
			Ciphertext: enc.EncodeToString(signed[len(h):]), Sig: enc.EncodeToString(sig)}
	}
	t.Fatalf("no forgery under %x: not a small-order key", weak)
	return nil
}

// TestOpenRefusesSmallOrderSenderKey: a sender key of small order
// authenticates no one, so a payload "sealed by" it may have been sealed by
// anybody. Open refuses such a key rather than vouch for the sender.
func TestOpenRefusesSmallOrderSenderKey(t *testing.T) {
	bob, err := GenerateKeys()
	require.NoError(t, err)
	for _, weak := range smallOrderKeys() {
		require.True(t, WeakSigningKey(weak), "%x", weak)
		s := forgeSealed(t, weak, bob.EncryptionKID, bob.EncryptionPublic, []byte("pay mallory"))
		pt, err := Open(s, bob.EncryptionPrivate, weak)
		require.Nil(t, pt, "%x: a forgery opened", weak)
		require.ErrorContains(t, err, "small order")
		require.NotErrorIs(t, err, ErrTampered, "a bad key is the caller's mistake")
	}
}

func TestWeakKeys(t *testing.T) {
	for range 64 {
		k, err := GenerateKeys()
		require.NoError(t, err)
		require.False(t, WeakSigningKey(k.SigningPublic))
		require.False(t, WeakEncryptionKey(k.EncryptionPublic))
	}
	require.False(t, WeakSigningKey(nil), "malformed, not weak")
	require.False(t, WeakEncryptionKey(make([]byte, 31)), "malformed, not weak")

	// The X25519 points of low order and their non-canonical spellings
	// below 2^255 (cr.yp.to/ecdh.html#validate), then the same with the
	// top bit set, which X25519 ignores.
	low := [][]byte{
		make([]byte, 32),
		{1, 31: 0},
		{0xe0, 0xeb, 0x7a, 0x7c, 0x3b, 0x41, 0xb8, 0xae, 0x16, 0x56, 0xe3, 0xfa, 0xf1, 0x9f, 0xc4, 0x6a, 0xda, 0x09, 0x8d, 0xeb, 0x9c, 0x32, 0xb1, 0xfd, 0x86, 0x62, 0x05, 0x16, 0x5f, 0x49, 0xb8, 0x00},
		{0x5f, 0x9c, 0x95, 0xbc, 0xa3, 0x50, 0x8c, 0x24, 0xb1, 0xd0, 0xb1, 0x55, 0x9c, 0x83, 0xef, 0x5b, 0x04, 0x44, 0x5c, 0xc4, 0x58, 0x1c, 0x8e, 0x86, 0xd8, 0x22, 0x4e, 0xdd, 0xd0, 0x9f, 0x11, 0x57},
		{0xec, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
		{0xed, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
		{0xee, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
	}
	for _, k := range low[:7] {
		top := append([]byte(nil), k...)
		top[31] |= 0x80
		low = append(low, top)
	}
	alice, err := GenerateKeys()
	require.NoError(t, err)
	for _, k := range low {
		require.True(t, WeakEncryptionKey(k), "%x", k)
		_, err := Seal([]byte("x"), "enc-low", k, alice.SigningKID, alice.SigningPrivate)
		require.Error(t, err, "%x: Seal refuses what WeakEncryptionKey calls weak", k)
	}
}
