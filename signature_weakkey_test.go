package pigeon_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/seal"
)

// identityKey is the Ed25519 encoding of the identity point, a public key
// of order 1; identitySig (R = the identity, S = 0) verifies under it as a
// signature of every message.
var (
	identityKey = append([]byte{1}, make([]byte, 31)...)
	identitySig = base64.RawURLEncoding.EncodeToString(append([]byte{1}, make([]byte, 63)...))
)

// TestWeakKeysAreRefused: under an Ed25519 key of small order anyone can
// sign (for the identity point, one fixed signature verifies for every
// message), and for an X25519 key of low order nothing can be sealed. Such
// keys are not published, and a signature never verifies under one.
func TestWeakKeysAreRefused(t *testing.T) {
	// Anyone "signs" any message as the holder of the identity key.
	m := exampleMessage()
	m.Signature = &pigeon.Signature{KID: "sig-weak", Alg: pigeon.AlgEd25519, Sig: identitySig}
	require.True(t, ed25519.Verify(identityKey, []byte("anything at all"), append([]byte{1}, make([]byte, 63)...)), "the forgery works in crypto/ed25519")
	err := pigeon.VerifyMessage(m, identityKey)
	require.Equal(t, pigeon.CodeSignatureInvalid, pigeon.ErrorCode(err), "%v", err)
	err = pigeon.VerifyMessageWithKeys(m, []pigeon.PublicKey{pigeon.Ed25519PublicKey("sig-weak", identityKey)})
	require.Equal(t, pigeon.CodeSignatureInvalid, pigeon.ErrorCode(err), "%v", err)

	ff := strings.Repeat("ff", 30)
	tests := []struct {
		name string
		key  pigeon.PublicKey
	}{
		{"ed25519 identity", pigeon.Ed25519PublicKey("k", identityKey)},
		{"ed25519 identity, sign bit set", pigeon.Ed25519PublicKey("k", hexKey(t, "01"+strings.Repeat("00", 30)+"80"))},
		{"ed25519 zero (order 4)", pigeon.Ed25519PublicKey("k", make([]byte, 32))},
		{"ed25519 order 8", pigeon.Ed25519PublicKey("k", hexKey(t, "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a"))},
		{"ed25519 order 8, negated", pigeon.Ed25519PublicKey("k", hexKey(t, "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85"))},
		{"ed25519 p-1 (order 2)", pigeon.Ed25519PublicKey("k", hexKey(t, "ec"+ff+"7f"))},
		{"ed25519 non-canonical identity p+1", pigeon.Ed25519PublicKey("k", hexKey(t, "ee"+ff+"ff"))},
		{"x25519 zero", pigeon.X25519PublicKey("k", make([]byte, 32))},
		{"x25519 one", pigeon.X25519PublicKey("k", append([]byte{1}, make([]byte, 31)...))},
		{"x25519 order 8", pigeon.X25519PublicKey("k", hexKey(t, "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"))},
		{"x25519 p", pigeon.X25519PublicKey("k", hexKey(t, "ed"+ff+"7f"))},
		{"x25519 with the top bit set", pigeon.X25519PublicKey("k", topBit(t))},
		{"x25519 at or above p", pigeon.X25519PublicKey("k", hexKey(t, "f1"+ff+"7f"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.key.Validate()
			require.Equal(t, pigeon.CodeInvalidArgument, pigeon.ErrorCode(err), "%v", err)
			require.ErrorContains(t, err, "order")
		})
	}

	// The account cannot publish one either.
	f := integrityFixture(t)
	_, err = f.e.CreateAccount(ctx, pigeon.Account{ID: signer})
	require.NoError(t, err)
	_, err = f.e.PutAccountKeys(ctx, signer, []pigeon.PublicKey{pigeon.Ed25519PublicKey("sig-weak", identityKey)})
	requireCode(t, err, pigeon.CodeBadRequest)
}

// topBit returns a fresh X25519 public key with its top bit, which X25519
// ignores, set: another spelling of the key, for which nothing sealed opens.
func topBit(t *testing.T) []byte {
	t.Helper()
	k, err := seal.GenerateKeys()
	require.NoError(t, err)
	b := append([]byte(nil), k.EncryptionPublic...)
	b[31] |= 0x80
	return b
}

func hexKey(t *testing.T, h string) []byte {
	t.Helper()
	b, err := hex.DecodeString(h)
	require.NoError(t, err)
	require.Len(t, b, 32)
	return b
}
