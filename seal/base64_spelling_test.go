package seal_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/seal"
)

// TestOpenRefusesRespelledFields: encoding/base64 skips CR and LF even in
// strict mode, so a ciphertext (whose length is not fixed) with a line
// break in it decoded to the same bytes and opened here, while a stricter
// decoder (the Rust client's) refuses it: one sealed part, two verdicts,
// and a sealed part anyone in the path could respell without breaking its
// seal. Every binary field is read in its one spelling only.
func TestOpenRefusesRespelledFields(t *testing.T) {
	alice, bob := keys(t), keys(t)
	data, err := seal.SealData(map[string]any{"room": "r"}, []byte("a payload long enough to break"), bob.EncryptionKID, bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate)
	require.NoError(t, err)
	_, _, err = seal.OpenData(data, bob.EncryptionPrivate, alice.SigningPublic)
	require.NoError(t, err)

	set := map[string]func(s *seal.Sealed) *string{
		"ciphertext":   func(s *seal.Sealed) *string { return &s.Ciphertext },
		"nonce":        func(s *seal.Sealed) *string { return &s.Nonce },
		"ephemeralKey": func(s *seal.Sealed) *string { return &s.EphemeralKey },
		"sig":          func(s *seal.Sealed) *string { return &s.Sig },
	}
	for field, at := range set {
		for _, tt := range []struct {
			name  string
			apply func(string) string
		}{
			{"LF inside", func(v string) string { return v[:8] + "\n" + v[8:] }},
			{"CR LF inside", func(v string) string { return v[:8] + "\r\n" + v[8:] }},
			{"LF at the end", func(v string) string { return v + "\n" }},
			{"CR at the start", func(v string) string { return "\r" + v }},
			// Same length as the original: a line break instead of one
			// character, which changes the bytes (never the same payload).
			{"LF for a character", func(v string) string { return v[:8] + "\n" + v[9:] }},
		} {
			t.Run(field+"/"+tt.name, func(t *testing.T) {
				var d map[string]json.RawMessage
				require.NoError(t, json.Unmarshal(data, &d))
				var s seal.Sealed
				require.NoError(t, json.Unmarshal(d[seal.Field], &s))
				p := at(&s)
				*p = tt.apply(*p)
				require.ErrorIs(t, s.Validate(), seal.ErrTampered)
				_, err := seal.Open(&s, bob.EncryptionPrivate, alice.SigningPublic)
				require.ErrorIs(t, err, seal.ErrTampered)
				raw, err := json.Marshal(s)
				require.NoError(t, err)
				d[seal.Field] = raw
				b, err := json.Marshal(d)
				require.NoError(t, err)
				_, _, err = seal.OpenData(b, bob.EncryptionPrivate, alice.SigningPublic)
				require.ErrorIs(t, err, seal.ErrTampered)
			})
		}
	}
}
