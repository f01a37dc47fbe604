package pigeon_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/seal"
	"pigeon/transport/transporttest"
)

const (
	signer  = "spiffe://sig/signer"
	copycat = "spiffe://sig/copycat"
)

// integrityFixture has a subject that requires signatures, one where they
// are optional, and one that requires end-to-end encryption with routing
// fields; signer and copycat may publish and receive on each.
func integrityFixture(t *testing.T) *fixture {
	return newFixture(t, func(o *pigeon.Options) {
		o.Catalog = transporttest.Options().Catalog
		allow := map[pigeon.Operation][]pigeon.RuleSpec{
			pigeon.OpPublish: {{Effect: "allow", Principals: []string{signer, copycat}}},
			pigeon.OpReceive: {{Effect: "allow", Principals: []string{signer, copycat}}},
		}
		o.Catalog.Schemas["sealed.v1"] = []byte(`{"type":"object","required":["kind","room"],"properties":{"kind":{"type":"string"},"room":{"type":"string"}}}`)
		o.Catalog.Subjects = append(o.Catalog.Subjects,
			pigeon.SubjectPolicy{Name: "signed.events", Version: "v1", Intents: []string{"tell"}, Policy: allow,
				Integrity: pigeon.IntegrityPolicy{Signature: "required"}},
			pigeon.SubjectPolicy{Name: "maybe-signed.events", Version: "v1", Intents: []string{"tell"}, Policy: allow,
				Integrity: pigeon.IntegrityPolicy{Signature: "optional"}},
			pigeon.SubjectPolicy{Name: "secret.chat", Version: "v1", Intents: []string{"tell"}, Policy: allow,
				Schema: &pigeon.SchemaRef{Name: "sealed.v1"},
				Data:   pigeon.DataPolicy{Encryption: "required", RoutingFields: []string{"kind", "room"}}},
		)
		o.Authenticator = pigeon.NewStaticTokens(
			pigeon.StaticToken{Token: "signer-token", Principal: signer},
			pigeon.StaticToken{Token: "copycat-token", Principal: copycat})
		o.Now = nil
	})
}

func TestSignatureGate(t *testing.T) {
	f := integrityFixture(t)
	_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: signer})
	require.NoError(t, err)
	pub1, priv1, _ := ed25519.GenerateKey(rand.Reader)
	pub2, priv2, _ := ed25519.GenerateKey(rand.Reader)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Now().UTC()
	old := pigeon.Ed25519PublicKey("k1", pub1)
	old.NotAfter = now.Add(-time.Minute) // rotated out a minute ago
	_, err = f.e.PutAccountKeys(ctx, signer, []pigeon.PublicKey{old, pigeon.Ed25519PublicKey("k2", pub2)})
	require.NoError(t, err)
	keys, err := f.e.AccountKeys(ctx, signer)
	require.NoError(t, err)
	require.Len(t, keys, 2, "a rotated key stays readable")

	s := f.connect("signer-token", "signed.events", "maybe-signed.events")
	// On an optional subject a signature may be left out, but one that is
	// there must verify as on a required one: a receiver that checks it
	// must not find an invalid signature on what the gates admitted.
	for _, subject := range []string{"signed.events", "maybe-signed.events"} {
		t.Run(subject, func(t *testing.T) {
			unsigned := pigeon.CodeSignatureRequired
			if subject == "maybe-signed.events" {
				unsigned = ""
			}
			signatureGateTable(t, s, subject, unsigned, keys, priv1, priv2, other, now)
		})
	}
}

func signatureGateTable(t *testing.T, s pigeon.Session, subject string, unsigned pigeon.Code, keys []pigeon.PublicKey, priv1, priv2, other ed25519.PrivateKey, now time.Time) {
	msg := func() *pigeon.Message {
		return &pigeon.Message{Type: "t", Subject: subject, Intent: "tell", Data: json.RawMessage(`{"n":1}`)}
	}
	tests := []struct {
		name string
		make func() *pigeon.Message
		code pigeon.Code
	}{
		{"unsigned", msg, unsigned},
		{"valid", func() *pigeon.Message { m := msg(); require.NoError(t, pigeon.SignMessage(m, "k2", priv2)); return m }, ""},
		{"tampered data", func() *pigeon.Message {
			m := msg()
			require.NoError(t, pigeon.SignMessage(m, "k2", priv2))
			m.Data = json.RawMessage(`{"n":2}`)
			return m
		}, pigeon.CodeSignatureInvalid},
		{"wrong key", func() *pigeon.Message { m := msg(); require.NoError(t, pigeon.SignMessage(m, "k2", other)); return m }, pigeon.CodeSignatureInvalid},
		{"rotated key at a later time", func() *pigeon.Message { m := msg(); require.NoError(t, pigeon.SignMessage(m, "k1", priv1)); return m }, pigeon.CodeSignatureInvalid},
		{"rotated key for an older message", func() *pigeon.Message {
			m := msg()
			m.Time = now.Add(-time.Hour).Format(time.RFC3339Nano)
			require.NoError(t, pigeon.SignMessage(m, "k1", priv1))
			return m
		}, ""},
		{"unknown kid", func() *pigeon.Message { m := msg(); require.NoError(t, pigeon.SignMessage(m, "k9", priv2)); return m }, pigeon.CodeSignatureInvalid},
		// The second form covers the sender's envelope fields: a relay
		// that changes one is refused.
		{"type changed after signing", signedThen(t, msg, priv2, func(m *pigeon.Message) { m.Type = "t2" }), pigeon.CodeSignatureInvalid},
		{"replyTo set after signing", signedThen(t, msg, priv2, func(m *pigeon.Message) { m.ReplyTo = "inbox.elsewhere" }), pigeon.CodeSignatureInvalid},
		{"correlationId set after signing", signedThen(t, msg, priv2, func(m *pigeon.Message) { m.CorrelationID = "c" }), pigeon.CodeSignatureInvalid},
		{"reason set after signing", signedThen(t, msg, priv2, func(m *pigeon.Message) { m.Reason = "r" }), pigeon.CodeSignatureInvalid},
		{"v removed", signedThen(t, msg, priv2, func(m *pigeon.Message) { m.Signature.V = 0 }), pigeon.CodeSignatureInvalid},
		{"v 1", signedThen(t, msg, priv2, func(m *pigeon.Message) { m.Signature.V = 1 }), pigeon.CodeSignatureInvalid},
		{"v 3", signedThen(t, msg, priv2, func(m *pigeon.Message) { m.Signature.V = 3 }), pigeon.CodeSignatureInvalid},
		{"all covered fields set, then signed", func() *pigeon.Message {
			m := msg()
			m.IdempotencyKey, m.ReplyTo, m.CorrelationID, m.Reason = "idem-"+rand.Text(), "inbox.signer", "c-1", "because"
			require.NoError(t, pigeon.SignMessage(m, "k2", priv2))
			return m
		}, ""},
		// A signature of the first form (made before the second) still
		// verifies, and does not cover type.
		{"first form", func() *pigeon.Message {
			m := msg()
			m.ID, m.Time = rand.Text(), now.Format(time.RFC3339Nano)
			signFirstForm(t, m, "k2", priv2)
			m.Type = "t2"
			return m
		}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.make()
			res, err := s.Publish(ctx, m)
			if tc.code == "" {
				require.NoError(t, err)
				if m.Signature != nil {
					// The recipient verifies the same signature with the library.
					require.NoError(t, pigeon.VerifyMessageWithKeys(res.Message, keys))
				}
				return
			}
			requireCode(t, err, tc.code)
		})
	}
}

// signedThen makes msg(), signs it with priv as k2, and edits it.
func signedThen(t *testing.T, msg func() *pigeon.Message, priv ed25519.PrivateKey, edit func(*pigeon.Message)) func() *pigeon.Message {
	return func() *pigeon.Message {
		m := msg()
		require.NoError(t, pigeon.SignMessage(m, "k2", priv))
		edit(m)
		return m
	}
}

// signFirstForm signs m (id and time set) in the first form: a signature
// without v, over ["pigeon-sig-v1", subject, id, time, data].
func signFirstForm(t *testing.T, m *pigeon.Message, kid string, priv ed25519.PrivateKey) {
	m.Signature = &pigeon.Signature{KID: kid, Alg: pigeon.AlgEd25519}
	in, err := pigeon.CanonicalSigningInput(m)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(in, []byte(`["pigeon-sig-v1",`)), "%s", in)
	m.Signature.Sig = base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, in))
}

func TestEncryptionGate(t *testing.T) {
	f := integrityFixture(t)
	s := f.connect("signer-token", "secret.chat")
	rk, err := seal.GenerateKeys()
	require.NoError(t, err)
	sk, err := seal.GenerateKeys()
	require.NoError(t, err)
	sealedData := func(clear map[string]any) json.RawMessage {
		d, err := seal.SealData(clear, []byte(`{"text":"meet at noon"}`), rk.EncryptionKID, rk.EncryptionPublic, sk.SigningKID, sk.SigningPrivate)
		require.NoError(t, err)
		return d
	}
	tests := []struct {
		name string
		data json.RawMessage
		code pigeon.Code
	}{
		{"sealed with routing fields", sealedData(map[string]any{"kind": "chat", "room": "lobby"}), ""},
		{"clear payload", json.RawMessage(`{"kind":"chat","room":"lobby","text":"meet at noon"}`), pigeon.CodeEncryptionRequired},
		{"extra clear field", sealedData(map[string]any{"kind": "chat", "room": "lobby", "text": "leak"}), pigeon.CodeEncryptionRequired},
		{"not an object", json.RawMessage(`"x"`), pigeon.CodeEncryptionRequired},
		{"routing fields fail the schema", sealedData(map[string]any{"kind": "chat"}), pigeon.CodeSchemaInvalid},
		// The sealed part must be a sealed object, not clear text under
		// the name: before, any non-empty object passed.
		{"clear text under sealed", json.RawMessage(`{"kind":"chat","room":"lobby","sealed":{"text":"meet at noon"}}`), pigeon.CodeEncryptionRequired},
		{"a sealed object with a clear member more", withSealedMember(t, sealedData(map[string]any{"kind": "chat", "room": "lobby"}), "text", `"meet at noon"`), pigeon.CodeEncryptionRequired},
		{"a sealed object of an unknown version", withSealedMember(t, sealedData(map[string]any{"kind": "chat", "room": "lobby"}), "v", `9`), pigeon.CodeEncryptionRequired},
		{"a sealed object whose ciphertext is not base64", withSealedMember(t, sealedData(map[string]any{"kind": "chat", "room": "lobby"}), "ciphertext", `"meet at noon"`), pigeon.CodeEncryptionRequired},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := s.Publish(ctx, &pigeon.Message{Type: "t", Subject: "secret.chat", Intent: "tell", Data: tc.data})
			if tc.code != "" {
				requireCode(t, err, tc.code)
				return
			}
			require.NoError(t, err)
			clear, payload, err := seal.OpenData(res.Message.Data, rk.EncryptionPrivate, sk.SigningPublic)
			require.NoError(t, err)
			require.Equal(t, "lobby", clear["room"])
			require.JSONEq(t, `{"text":"meet at noon"}`, string(payload))
		})
	}
}

// withSealedMember returns data with member name of its sealed part set to
// the JSON text value.
func withSealedMember(t *testing.T, data json.RawMessage, name, value string) json.RawMessage {
	t.Helper()
	var d map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(data, &d))
	var sealed map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(d["sealed"], &sealed))
	sealed[name] = json.RawMessage(value)
	b, err := json.Marshal(sealed)
	require.NoError(t, err)
	d["sealed"] = b
	out, err := json.Marshal(d)
	require.NoError(t, err)
	return out
}
