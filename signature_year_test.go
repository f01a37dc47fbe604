package pigeon_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestSignatureTimeYearZero: RFC 3339 writes years 0000 to 9999 and Go
// reads year 0000, but the Python client (datetime starts at year 1)
// refuses it, so the signature gate admitted a signed message whose
// signature no Python receiver verifies. The broker takes no message time
// in year 0000, signed or not, as it takes no other time a client refuses.
func TestSignatureTimeYearZero(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	keys := []pigeon.PublicKey{pigeon.Ed25519PublicKey("k1", pub)}
	for _, tm := range []string{
		"0000-01-01T00:00:00Z",
		"0000-06-15T12:00:00.000Z",
		"0000-12-31T23:30:00-01:00", // year 1 in UTC; still year 0 as written
	} {
		t.Run(tm, func(t *testing.T) {
			m := &pigeon.Message{ID: "msg_1", Subject: "signed.events", Time: tm, Data: json.RawMessage(`{"n":1}`)}
			signWithTime(t, m, "k1", priv)
			require.NoError(t, pigeon.VerifyMessage(m, pub), "the raw signature is sound")
			requireCode(t, pigeon.VerifyMessageWithKeys(m, keys), pigeon.CodeSignatureInvalid)
			requireCode(t, pigeon.SignMessage(&pigeon.Message{Subject: "signed.events", Time: tm}, "k1", priv), pigeon.CodeEnvelopeInvalid)
		})
	}
	// The broker refuses the time on any message, signed or not.
	f := integrityFixture(t)
	_, err = f.connect("signer-token", "maybe-signed.events").Publish(ctx, &pigeon.Message{Type: "t", Subject: "maybe-signed.events", Intent: "tell", Time: "0000-01-01T00:00:00Z", Data: json.RawMessage(`{}`)})
	requireCode(t, err, pigeon.CodeEnvelopeInvalid)

	for _, tm := range []string{"0001-01-01T00:00:00Z", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59.999Z"} {
		m := &pigeon.Message{ID: "msg_1", Subject: "signed.events", Time: tm, Data: json.RawMessage(`{"n":1}`)}
		require.NoError(t, pigeon.SignMessage(m, "k1", priv), tm)
		require.NoError(t, pigeon.VerifyMessageWithKeys(m, keys), tm)
	}
}

// TestKeyWindowYearZero: a key whose notBefore is in year 0000 is valid
// now for the broker and never for the Python client, which cannot read
// the date: the gate would admit every signature the key makes and Python
// receivers refuse each. A key window lies in the years 0001 to 9999 (a
// later year does not even marshal to JSON).
func TestKeyWindowYearZero(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	year0 := time.Date(0, 6, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name string
		set  func(k *pigeon.PublicKey)
	}{
		{"notBefore", func(k *pigeon.PublicKey) { k.NotBefore = year0 }},
		{"notAfter", func(k *pigeon.PublicKey) { k.NotAfter = year0 }},
		{"notAfter beyond 9999", func(k *pigeon.PublicKey) { k.NotAfter = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }},
		{"notBefore from JSON", func(k *pigeon.PublicKey) {
			require.NoError(t, json.Unmarshal([]byte(`"0000-01-01T00:00:00Z"`), &k.NotBefore))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k := pigeon.Ed25519PublicKey("k1", pub)
			tt.set(&k)
			requireCode(t, k.Validate(), pigeon.CodeInvalidArgument)
		})
	}
	k := pigeon.Ed25519PublicKey("k1", pub)
	k.NotBefore = time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC)
	k.NotAfter = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	require.NoError(t, k.Validate())
}
