package pigeon_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/seal"
)

// TestSelectKeyPassesOverKeysTheServerNeverLists: SelectKey chooses among
// the keys PublicKey.Validate accepts (the window aside), as the
// TypeScript, Python and Rust clients read a key list (docs/protocol.md,
// "Published keys"): an entry with an empty kid or a key that is not 32
// bytes, listed with a later notBefore than a sound key, was chosen to
// seal for, and sealing failed though the sound key was listed.
func TestSelectKeyPassesOverKeysTheServerNeverLists(t *testing.T) {
	k, err := seal.GenerateKeys()
	require.NoError(t, err)
	sound := pigeon.X25519PublicKey(k.EncryptionKID, k.EncryptionPublic)
	signing := pigeon.Ed25519PublicKey(k.SigningKID, k.SigningPublic)
	later := time.Now().Add(-time.Hour)
	for _, tt := range []struct {
		name string
		bad  func(pigeon.PublicKey) pigeon.PublicKey
	}{
		{"kid empty", func(p pigeon.PublicKey) pigeon.PublicKey { p.KID = ""; return p }},
		{"kid holding a space", func(p pigeon.PublicKey) pigeon.PublicKey { p.KID += " 2"; return p }},
		{"alg of the other use", func(p pigeon.PublicKey) pigeon.PublicKey {
			p.Alg = map[string]string{pigeon.UseSig: pigeon.AlgX25519, pigeon.UseEnc: pigeon.AlgEd25519}[p.Use]
			return p
		}},
		{"key of 31 bytes", func(p pigeon.PublicKey) pigeon.PublicKey { p.Key = p.Key[:41]; return p }},
		{"key padded", func(p pigeon.PublicKey) pigeon.PublicKey { p.Key += "="; return p }},
		{"key of small order", func(p pigeon.PublicKey) pigeon.PublicKey {
			p.Key = "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
			return p
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bad := tt.bad(sound)
			bad.NotBefore = later
			got, ok := pigeon.SelectKey([]pigeon.PublicKey{sound, bad}, "", pigeon.UseEnc, time.Now())
			require.True(t, ok)
			require.Equal(t, sound.KID, got.KID)
			badSig := tt.bad(signing)
			_, ok = pigeon.SelectKey([]pigeon.PublicKey{badSig}, badSig.KID, pigeon.UseSig, time.Now())
			require.False(t, ok, "a signing key the server never lists is chosen by its kid")
		})
	}
}
