package seal_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/seal"
)

func keys(t testing.TB) *seal.Keys {
	t.Helper()
	k, err := seal.GenerateKeys()
	require.NoError(t, err)
	return k
}

func TestRoundTrip(t *testing.T) {
	alice, bob := keys(t), keys(t)
	for _, pt := range [][]byte{nil, {}, []byte("hello, bob"), bytes.Repeat([]byte{0xA5}, 64<<10)} {
		s, err := seal.Seal(pt, bob.EncryptionKID, bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate)
		require.NoError(t, err)
		require.Equal(t, seal.Version, s.V)
		require.Equal(t, seal.Alg, s.Alg)
		require.Equal(t, bob.EncryptionKID, s.RecipientKID)
		require.Equal(t, alice.SigningKID, s.SenderKID)
		require.NoError(t, s.Validate())

		// Through JSON, as it travels.
		b, err := json.Marshal(s)
		require.NoError(t, err)
		var back seal.Sealed
		require.NoError(t, json.Unmarshal(b, &back))
		got, err := seal.Open(&back, bob.EncryptionPrivate, alice.SigningPublic)
		require.NoError(t, err)
		require.Equal(t, len(pt), len(got))
		require.True(t, bytes.Equal(pt, got))
	}
}

func TestSealIsRandomized(t *testing.T) {
	alice, bob := keys(t), keys(t)
	a, err := seal.Seal([]byte("same"), bob.EncryptionKID, bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate)
	require.NoError(t, err)
	b, err := seal.Seal([]byte("same"), bob.EncryptionKID, bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate)
	require.NoError(t, err)
	require.NotEqual(t, a.EphemeralKey, b.EphemeralKey)
	require.NotEqual(t, a.Nonce, b.Nonce)
	require.NotEqual(t, a.Ciphertext, b.Ciphertext)
}

// flip returns the base64url field s with one bit of byte i changed.
func flip(s string, i int) string {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		panic(err)
	}
	b[i%len(b)] ^= 0x01
	return base64.RawURLEncoding.EncodeToString(b)
}

func TestTampered(t *testing.T) {
	alice, bob, mallory := keys(t), keys(t), keys(t)
	tests := []struct {
		name        string
		edit        func(s *seal.Sealed)
		unsupported bool
	}{
		{"ciphertext first byte", func(s *seal.Sealed) { s.Ciphertext = flip(s.Ciphertext, 0) }, false},
		{"ciphertext tag", func(s *seal.Sealed) { s.Ciphertext = flip(s.Ciphertext, -1+len("secret")+16) }, false},
		{"ciphertext truncated", func(s *seal.Sealed) {
			b, _ := base64.RawURLEncoding.DecodeString(s.Ciphertext)
			s.Ciphertext = base64.RawURLEncoding.EncodeToString(b[:len(b)-1])
		}, false},
		{"ciphertext too short", func(s *seal.Sealed) { s.Ciphertext = "AAAA" }, false},
		{"nonce", func(s *seal.Sealed) { s.Nonce = flip(s.Nonce, 5) }, false},
		{"nonce short", func(s *seal.Sealed) { s.Nonce = s.Nonce[:20] }, false},
		{"ephemeral key", func(s *seal.Sealed) { s.EphemeralKey = flip(s.EphemeralKey, 3) }, false},
		{"ephemeral key of low order", func(s *seal.Sealed) {
			s.EphemeralKey = base64.RawURLEncoding.EncodeToString(make([]byte, 32))
		}, false},
		{"recipient kid", func(s *seal.Sealed) { s.RecipientKID += "x" }, false},
		{"sender kid", func(s *seal.Sealed) { s.SenderKID = mallory.SigningKID }, false},
		{"empty kid", func(s *seal.Sealed) { s.SenderKID = "" }, false},
		{"sig", func(s *seal.Sealed) { s.Sig = flip(s.Sig, 7) }, false},
		{"sig removed", func(s *seal.Sealed) { s.Sig = "" }, false},
		{"sig padded", func(s *seal.Sealed) { s.Sig += "==" }, false},
		{"field not base64url", func(s *seal.Sealed) { s.Nonce = strings.Repeat("+", len(s.Nonce)) }, false},
		{"non-canonical base64 trailing bits", func(s *seal.Sealed) {
			// 32 bytes → 43 chars; the last char carries 2 unused bits.
			last := s.EphemeralKey[len(s.EphemeralKey)-1]
			const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
			s.EphemeralKey = s.EphemeralKey[:len(s.EphemeralKey)-1] + string(alphabet[strings.IndexByte(alphabet, last)|1])
		}, false},
		{"sig by another key", func(s *seal.Sealed) {
			s.Sig = base64.RawURLEncoding.EncodeToString(ed25519.Sign(mallory.SigningPrivate, []byte("anything")))
		}, false},
		{"version", func(s *seal.Sealed) { s.V = 2 }, true},
		{"alg", func(s *seal.Sealed) { s.Alg = "none" }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := seal.Seal([]byte("secret"), bob.EncryptionKID, bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate)
			require.NoError(t, err)
			tt.edit(s)
			pt, err := seal.Open(s, bob.EncryptionPrivate, alice.SigningPublic)
			require.Nil(t, pt)
			if tt.unsupported {
				require.ErrorIs(t, err, seal.ErrUnsupported)
			} else {
				require.ErrorIs(t, err, seal.ErrTampered)
			}
		})
	}
	_, err := seal.Open(nil, bob.EncryptionPrivate, alice.SigningPublic)
	require.ErrorIs(t, err, seal.ErrTampered)
}

func TestWrongKeys(t *testing.T) {
	alice, bob, mallory := keys(t), keys(t), keys(t)
	s, err := seal.Seal([]byte("secret"), bob.EncryptionKID, bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate)
	require.NoError(t, err)

	_, err = seal.Open(s, mallory.EncryptionPrivate, alice.SigningPublic)
	require.ErrorIs(t, err, seal.ErrTampered, "wrong recipient key")
	_, err = seal.Open(s, bob.EncryptionPrivate, mallory.SigningPublic)
	require.ErrorIs(t, err, seal.ErrTampered, "wrong sender key")
	_, err = seal.Open(s, alice.EncryptionPrivate, bob.SigningPublic)
	require.ErrorIs(t, err, seal.ErrTampered, "keys swapped")

	// Mallory takes Alice's sealed part, names herself as sender and signs
	// header ‖ ciphertext with her own key: the header she must sign binds
	// her public key, which changes the AEAD's associated data, so Bob
	// cannot be fooled into thinking Mallory wrote it.
	forged := *s
	forged.SenderKID = mallory.SigningKID
	forged.Sig = resign(t, &forged, bob.EncryptionPublic, mallory)
	_, err = seal.Open(&forged, bob.EncryptionPrivate, mallory.SigningPublic)
	require.ErrorIs(t, err, seal.ErrTampered, "ciphertext re-signed by a third party")

	// Malformed keys are the caller's mistake, not tampering.
	_, err = seal.Open(s, bob.EncryptionPrivate[:31], alice.SigningPublic)
	require.Error(t, err)
	require.NotErrorIs(t, err, seal.ErrTampered)
	_, err = seal.Open(s, bob.EncryptionPrivate, alice.SigningPublic[:31])
	require.Error(t, err)
	require.NotErrorIs(t, err, seal.ErrTampered)
}

// resign signs forged's header ‖ ciphertext with m's key, as an attacker
// who knows the format would, binding m's public key in the header.
func resign(t *testing.T, s *seal.Sealed, recipientPub []byte, m *seal.Keys) string {
	t.Helper()
	dec := func(v string) []byte {
		b, err := base64.RawURLEncoding.DecodeString(v)
		require.NoError(t, err)
		return b
	}
	h := []byte("pigeon-seal-v1\x00")
	for _, f := range [][]byte{[]byte(s.Alg), []byte(s.RecipientKID), []byte(s.SenderKID), recipientPub, m.SigningPublic, dec(s.EphemeralKey), dec(s.Nonce)} {
		h = append(h, byte(len(f)>>8), byte(len(f)))
		h = append(h, f...)
	}
	return base64.RawURLEncoding.EncodeToString(ed25519.Sign(m.SigningPrivate, append(h, dec(s.Ciphertext)...)))
}

// TestHeaderFormat pins the header layout documented in docs/security.md:
// a signature made over the documented bytes verifies.
func TestHeaderFormat(t *testing.T) {
	alice, bob := keys(t), keys(t)
	s, err := seal.Seal([]byte("secret"), bob.EncryptionKID, bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate)
	require.NoError(t, err)
	s.Sig = resign(t, s, bob.EncryptionPublic, alice)
	pt, err := seal.Open(s, bob.EncryptionPrivate, alice.SigningPublic)
	require.NoError(t, err)
	require.Equal(t, "secret", string(pt))
}

func TestSealErrors(t *testing.T) {
	alice, bob := keys(t), keys(t)
	tests := []struct {
		name   string
		rkid   string
		rpub   []byte
		skid   string
		spriv  ed25519.PrivateKey
		substr string
	}{
		{"short recipient key", bob.EncryptionKID, bob.EncryptionPublic[:31], alice.SigningKID, alice.SigningPrivate, "recipient key"},
		{"low-order recipient key", bob.EncryptionKID, make([]byte, 32), alice.SigningKID, alice.SigningPrivate, "recipient key"},
		{"short sender key", bob.EncryptionKID, bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate[:32], "sender key"},
		{"no recipient kid", "", bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate, "kid"},
		{"long sender kid", bob.EncryptionKID, bob.EncryptionPublic, strings.Repeat("k", 129), alice.SigningPrivate, "kid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := seal.Seal([]byte("x"), tt.rkid, tt.rpub, tt.skid, tt.spriv)
			require.Nil(t, s)
			require.ErrorContains(t, err, tt.substr)
		})
	}
}

func TestSealData(t *testing.T) {
	alice, bob, mallory := keys(t), keys(t), keys(t)
	clear := map[string]any{"kind": "chat", "room": "lobby"}
	data, err := seal.SealData(clear, []byte(`{"text":"meet at noon"}`), bob.EncryptionKID, bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"kind": "chat", "room": "lobby"}, clear, "clear is not modified")

	// Routing fields are in clear beside the sealed part; the payload is not.
	var top map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(data, &top))
	require.Len(t, top, 3)
	require.JSONEq(t, `"lobby"`, string(top["room"]))
	require.JSONEq(t, `"chat"`, string(top["kind"]))
	require.Contains(t, top, seal.Field)
	require.NotContains(t, string(data), "noon")

	gotClear, payload, err := seal.OpenData(data, bob.EncryptionPrivate, alice.SigningPublic)
	require.NoError(t, err)
	require.Equal(t, clear, gotClear)
	require.JSONEq(t, `{"text":"meet at noon"}`, string(payload))

	_, _, err = seal.OpenData(data, mallory.EncryptionPrivate, alice.SigningPublic)
	require.ErrorIs(t, err, seal.ErrTampered)

	tests := []struct {
		name string
		data string
		want error
	}{
		{"no sealed part", `{"room":"lobby"}`, seal.ErrNotSealed},
		{"sealed part not an object", `{"sealed":"x"}`, seal.ErrTampered},
		{"unknown member in sealed part", strings.Replace(string(data), `"sig":`, `"extra":1,"sig":`, 1), seal.ErrTampered},
		{"sealed part emptied", `{"sealed":{}}`, seal.ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := seal.OpenData(json.RawMessage(tt.data), bob.EncryptionPrivate, alice.SigningPublic)
			require.ErrorIs(t, err, tt.want)
		})
	}
	for _, bad := range []string{`[]`, `null`, `"x"`, `{`} {
		_, _, err := seal.OpenData(json.RawMessage(bad), bob.EncryptionPrivate, alice.SigningPublic)
		require.Error(t, err, bad)
	}

	_, err = seal.SealData(map[string]any{seal.Field: 1}, nil, bob.EncryptionKID, bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate)
	require.Error(t, err)
	_, err = seal.SealData(map[string]any{"f": func() {}}, nil, bob.EncryptionKID, bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate)
	require.Error(t, err)
	data, err = seal.SealData(nil, []byte("x"), bob.EncryptionKID, bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate)
	require.NoError(t, err)
	gotClear, payload, err = seal.OpenData(data, bob.EncryptionPrivate, alice.SigningPublic)
	require.NoError(t, err)
	require.Empty(t, gotClear)
	require.Equal(t, "x", string(payload))
}

func TestGenerateKeys(t *testing.T) {
	a, b := keys(t), keys(t)
	require.Len(t, a.SigningPublic, ed25519.PublicKeySize)
	require.Len(t, a.SigningPrivate, ed25519.PrivateKeySize)
	require.Len(t, a.EncryptionPublic, seal.KeySize)
	require.Len(t, a.EncryptionPrivate, seal.KeySize)
	require.True(t, strings.HasPrefix(a.SigningKID, "sig-"))
	require.True(t, strings.HasPrefix(a.EncryptionKID, "enc-"))
	require.Len(t, a.SigningKID, 4+16)
	require.Equal(t, seal.KeyID("sig-", a.SigningPublic), a.SigningKID)
	require.NotEqual(t, a.SigningKID, b.SigningKID)
	require.NotEqual(t, a.EncryptionKID, b.EncryptionKID)
	require.Equal(t, a.SigningPublic, a.SigningPrivate.Public())

	// Printing never shows a private key.
	priv := base64.RawURLEncoding.EncodeToString(a.EncryptionPrivate)
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		for _, v := range []any{a, *a} {
			out := fmt.Sprintf(f, v)
			require.NotContains(t, out, priv)
			require.NotContains(t, out, fmt.Sprint([]byte(a.SigningPrivate)))
			require.Contains(t, out, a.SigningKID)
		}
	}
}

func Example() {
	// Each program generates its keys and publishes the public halves
	// (PUT /v1/accounts/{id}/keys); private halves stay with the program.
	alice, _ := seal.GenerateKeys()
	bob, _ := seal.GenerateKeys()

	// Alice seals for Bob's published encryption key. The room stays in
	// clear: the broker routes on it.
	data, err := seal.SealData(map[string]any{"room": "lobby"}, []byte("meet at noon"),
		bob.EncryptionKID, bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate)
	if err != nil {
		panic(err)
	}

	// Bob opens with his private key and Alice's published signing key.
	clear, payload, err := seal.OpenData(data, bob.EncryptionPrivate, alice.SigningPublic)
	if err != nil {
		panic(err)
	}
	fmt.Println(clear["room"], string(payload))
	// Output: lobby meet at noon
}

func BenchmarkSeal(b *testing.B) {
	alice, bob := keys(b), keys(b)
	for _, size := range []int{64, 1 << 10, 64 << 10} {
		pt := make([]byte, size)
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := seal.Seal(pt, bob.EncryptionKID, bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkOpen(b *testing.B) {
	alice, bob := keys(b), keys(b)
	for _, size := range []int{64, 1 << 10, 64 << 10} {
		s, err := seal.Seal(make([]byte, size), bob.EncryptionKID, bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate)
		require.NoError(b, err)
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := seal.Open(s, bob.EncryptionPrivate, alice.SigningPublic); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzOpenData checks that OpenData never panics on hostile data and opens
// nothing that was not sealed by the sender for the recipient.
func FuzzOpenData(f *testing.F) {
	alice, bob := keys(f), keys(f)
	good, err := seal.SealData(map[string]any{"room": "lobby"}, []byte("hi"), bob.EncryptionKID, bob.EncryptionPublic, alice.SigningKID, alice.SigningPrivate)
	require.NoError(f, err)
	for _, s := range []string{string(good), `{}`, `{"sealed":{}}`, `{"sealed":{"v":1}}`, `null`, `[`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		clear, payload, err := seal.OpenData(data, bob.EncryptionPrivate, alice.SigningPublic)
		if err != nil {
			require.Nil(t, clear)
			require.Nil(t, payload)
			return
		}
		// Only the one genuine sealed object opens; clear fields may vary.
		require.Equal(t, "hi", string(payload))
	})
}
