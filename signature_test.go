package pigeon_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"pigeon/seal"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// exampleKey is the key of the worked example in docs/security.md: the
// Ed25519 seed 00 01 02 … 1f.
func exampleKey() ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(i)
	}
	return ed25519.NewKeyFromSeed(seed)
}

func exampleMessage() *pigeon.Message {
	return &pigeon.Message{
		Subject: "chat.messages",
		ID:      "msg_01",
		Time:    "2026-11-29T12:00:00.000Z",
		Type:    "chat.posted",
		Intent:  "chat",
		Data:    json.RawMessage(`{"text": "h\u00e9llo", "room": "lobby", "n": 1.50}`),
	}
}

// The values quoted in docs/security.md.
const (
	docSigningInput   = `["pigeon-sig-v2","chat.messages","msg_01","2026-11-29T12:00:00.000Z","chat.posted","chat","","","","",{"n":1.5,"room":"lobby","text":"héllo"}]`
	docPublicKey      = "A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg"
	docSignature      = "1sCiND_553NEnKNn9yAitE7KuCCHYlZ4UpwPRJOm4k22oRsy3tBWrcn6esyaojZq9vrLMPqzFJRdJ4hBp3cgBA"
	docSigningInputV1 = `["pigeon-sig-v1","chat.messages","msg_01","2026-11-29T12:00:00.000Z",{"n":1.5,"room":"lobby","text":"héllo"}]`
	docSignatureV1    = "j5XAXnPKHq6bYc_8dPOiUfL0WPFMTsrO4Bm0QYZ5Da5zq75Jwt_37bMtGhB-04Z9eaxwM2-JNt6EstPh2GPyDg"
)

func TestCanonicalSigningInputWorkedExample(t *testing.T) {
	in, err := pigeon.CanonicalSigningInput(exampleMessage())
	require.NoError(t, err)
	require.Equal(t, docSigningInput, string(in))

	priv := exampleKey()
	pub := priv.Public().(ed25519.PublicKey)
	require.Equal(t, docPublicKey, pigeon.Ed25519PublicKey("k", pub).Key)
	m := exampleMessage()
	require.NoError(t, pigeon.SignMessage(m, "sig-2026-11", priv))
	require.Equal(t, &pigeon.Signature{KID: "sig-2026-11", Alg: "ed25519", Sig: docSignature, V: pigeon.SignatureV2}, m.Signature)

	// A signature of the first form (no "v") made before still verifies,
	// over its own input.
	m = exampleMessage()
	m.Signature = &pigeon.Signature{KID: "sig-2026-11", Alg: "ed25519", Sig: docSignatureV1}
	in, err = pigeon.CanonicalSigningInput(m)
	require.NoError(t, err)
	require.Equal(t, docSigningInputV1, string(in))
	require.NoError(t, pigeon.VerifyMessage(m, pub))
}

func TestCanonicalSigningInput(t *testing.T) {
	tests := []struct {
		name string
		edit func(m *pigeon.Message)
		want string // empty: an error
	}{
		{"empty data is {}", func(m *pigeon.Message) { m.Data = nil },
			`["pigeon-sig-v2","chat.messages","msg_01","2026-11-29T12:00:00.000Z","chat.posted","chat","","","","",{}]`},
		{"null data", func(m *pigeon.Message) { m.Data = json.RawMessage("null") },
			`["pigeon-sig-v2","chat.messages","msg_01","2026-11-29T12:00:00.000Z","chat.posted","chat","","","","",null]`},
		{"strings escaped as JCS", func(m *pigeon.Message) { m.Subject = "a\"b\\c\n<&>\u2028"; m.Data = json.RawMessage(" [ 1e2 ] ") },
			"[\"pigeon-sig-v2\",\"a\\\"b\\\\c\\n<&>\u2028\",\"msg_01\",\"2026-11-29T12:00:00.000Z\",\"chat.posted\",\"chat\",\"\",\"\",\"\",\"\",[100]]"},
		{"the second form covers six more fields, in order", func(m *pigeon.Message) {
			m.Type, m.Intent, m.IdempotencyKey, m.ReplyTo, m.CorrelationID, m.Reason = "t", "i", "k", "r", "c", "why\n"
		}, `["pigeon-sig-v2","chat.messages","msg_01","2026-11-29T12:00:00.000Z","t","i","k","r","c","why\n",{"n":1.5,"room":"lobby","text":"héllo"}]`},
		{"fields the broker fills are not covered", func(m *pigeon.Message) {
			m.Source, m.SpecVersion, m.Classification, m.Region = "s", "1.0", "public", "eu"
			m.Sequence, m.ContractID, m.SubjectID, m.SchemaID, m.AcceptedAt = 7, "ctr", "sub", "sch", "2026-11-29T12:00:01Z"
		}, docSigningInput},
		{"the form of a signature without v is the first", func(m *pigeon.Message) {
			m.Signature = &pigeon.Signature{KID: "k"}
			m.Type, m.Intent, m.ReplyTo = "t", "i", "r"
		}, docSigningInputV1},
		{"the form of a signature with v 2 is the second", func(m *pigeon.Message) { m.Signature = &pigeon.Signature{V: pigeon.SignatureV2} },
			docSigningInput},
		{"a signature of another form", func(m *pigeon.Message) { m.Signature = &pigeon.Signature{V: 1} }, ""},
		{"a signature of a later form", func(m *pigeon.Message) { m.Signature = &pigeon.Signature{V: 3} }, ""},
		{"no subject", func(m *pigeon.Message) { m.Subject = "" }, ""},
		{"no id", func(m *pigeon.Message) { m.ID = "" }, ""},
		{"no time", func(m *pigeon.Message) { m.Time = "" }, ""},
		{"invalid UTF-8 id", func(m *pigeon.Message) { m.ID = "msg_\xff" }, ""},
		{"invalid UTF-8 intent", func(m *pigeon.Message) { m.Intent = "chat\xff" }, ""},
		{"invalid UTF-8 reason", func(m *pigeon.Message) { m.Reason = "\xc3" }, ""},
		{"duplicate data key", func(m *pigeon.Message) { m.Data = json.RawMessage(`{"a":1,"a":2}`) }, ""},
		{"invalid data", func(m *pigeon.Message) { m.Data = json.RawMessage(`{`) }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := exampleMessage()
			tt.edit(m)
			in, err := pigeon.CanonicalSigningInput(m)
			if tt.want == "" {
				require.Error(t, err)
				require.Equal(t, pigeon.CodeEnvelopeInvalid, pigeon.ErrorCode(err))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, string(in))
		})
	}
}

func TestSignVerify(t *testing.T) {
	priv := exampleKey()
	pub := priv.Public().(ed25519.PublicKey)
	_, otherPriv, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	otherPub := otherPriv.Public().(ed25519.PublicKey)

	tests := []struct {
		name string
		edit func(m *pigeon.Message)
		pub  ed25519.PublicKey
		code pigeon.Code
	}{
		{"valid", func(*pigeon.Message) {}, pub, pigeon.CodeOK},
		{"data reformatted", func(m *pigeon.Message) {
			m.Data = json.RawMessage("{\n  \"room\" : \"lobby\", \"n\": 15e-1,\n  \"text\": \"h\u00e9llo\"\n}")
		}, pub, pigeon.CodeOK},
		{"classification changed (not covered)", func(m *pigeon.Message) { m.Classification = "public" }, pub, pigeon.CodeOK},
		{"region, source and specversion changed (not covered)", func(m *pigeon.Message) {
			m.Region, m.Source, m.SpecVersion = "eu", "svc", "1.0"
		}, pub, pigeon.CodeOK},
		{"broker fields set (not covered)", func(m *pigeon.Message) {
			m.Sequence, m.ContractID, m.SubjectID, m.SchemaID, m.AcceptedAt = 9, "ctr", "sub", "sch", "2026-11-29T12:00:01Z"
		}, pub, pigeon.CodeOK},
		{"type changed", func(m *pigeon.Message) { m.Type = "chat.deleted" }, pub, pigeon.CodeSignatureInvalid},
		{"intent changed", func(m *pigeon.Message) { m.Intent = "refund" }, pub, pigeon.CodeSignatureInvalid},
		{"idempotency key set", func(m *pigeon.Message) { m.IdempotencyKey = "k" }, pub, pigeon.CodeSignatureInvalid},
		{"replyTo set", func(m *pigeon.Message) { m.ReplyTo = "inbox.attacker" }, pub, pigeon.CodeSignatureInvalid},
		{"correlationId set", func(m *pigeon.Message) { m.CorrelationID = "c" }, pub, pigeon.CodeSignatureInvalid},
		{"reason set", func(m *pigeon.Message) { m.Reason = "r" }, pub, pigeon.CodeSignatureInvalid},
		{"v removed (read as the first form)", func(m *pigeon.Message) { m.Signature.V = 0 }, pub, pigeon.CodeSignatureInvalid},
		{"v 1", func(m *pigeon.Message) { m.Signature.V = 1 }, pub, pigeon.CodeSignatureInvalid},
		{"v 3", func(m *pigeon.Message) { m.Signature.V = 3 }, pub, pigeon.CodeSignatureInvalid},
		{"v -2", func(m *pigeon.Message) { m.Signature.V = -2 }, pub, pigeon.CodeSignatureInvalid},
		{"unsigned", func(m *pigeon.Message) { m.Signature = nil }, pub, pigeon.CodeSignatureRequired},
		{"subject changed", func(m *pigeon.Message) { m.Subject = "chat.other" }, pub, pigeon.CodeSignatureInvalid},
		{"id changed", func(m *pigeon.Message) { m.ID = "msg_02" }, pub, pigeon.CodeSignatureInvalid},
		{"time changed", func(m *pigeon.Message) { m.Time = "2026-11-29T12:00:00.001Z" }, pub, pigeon.CodeSignatureInvalid},
		{"data value changed", func(m *pigeon.Message) {
			m.Data = json.RawMessage(`{"text":"hello","room":"lobby","n":1.5}`)
		}, pub, pigeon.CodeSignatureInvalid},
		{"data member added", func(m *pigeon.Message) {
			m.Data = json.RawMessage(`{"text":"héllo","room":"lobby","n":1.5,"x":null}`)
		}, pub, pigeon.CodeSignatureInvalid},
		{"data made invalid", func(m *pigeon.Message) { m.Data = json.RawMessage(`{"n":1,"n":1}`) }, pub, pigeon.CodeSignatureInvalid},
		{"wrong key", func(*pigeon.Message) {}, otherPub, pigeon.CodeSignatureInvalid},
		{"short key", func(*pigeon.Message) {}, pub[:31], pigeon.CodeSignatureInvalid},
		{"alg changed", func(m *pigeon.Message) { m.Signature.Alg = "EdDSA" }, pub, pigeon.CodeSignatureInvalid},
		{"alg none", func(m *pigeon.Message) { m.Signature.Alg = "none"; m.Signature.Sig = "" }, pub, pigeon.CodeSignatureInvalid},
		{"sig not base64url", func(m *pigeon.Message) {
			m.Signature.Sig = strings.Repeat("+", len(m.Signature.Sig))
		}, pub, pigeon.CodeSignatureInvalid},
		{"sig padded", func(m *pigeon.Message) { m.Signature.Sig += "==" }, pub, pigeon.CodeSignatureInvalid},
		{"sig as std base64", func(m *pigeon.Message) {
			raw, err := base64.RawURLEncoding.DecodeString(m.Signature.Sig)
			require.NoError(t, err)
			m.Signature.Sig = base64.StdEncoding.EncodeToString(raw)
		}, pub, pigeon.CodeSignatureInvalid},
		{"sig non-canonical trailing bits", func(m *pigeon.Message) {
			s := []byte(m.Signature.Sig) // 86 chars: the last holds 2 unused bits
			s[len(s)-1] = base64Alphabet[strings.IndexByte(base64Alphabet, s[len(s)-1])|1]
			m.Signature.Sig = string(s)
		}, pub, pigeon.CodeSignatureInvalid},
		{"sig flipped", func(m *pigeon.Message) {
			raw, err := base64.RawURLEncoding.DecodeString(m.Signature.Sig)
			require.NoError(t, err)
			raw[10] ^= 1
			m.Signature.Sig = base64.RawURLEncoding.EncodeToString(raw)
		}, pub, pigeon.CodeSignatureInvalid},
		{"sig truncated", func(m *pigeon.Message) { m.Signature.Sig = m.Signature.Sig[:40] }, pub, pigeon.CodeSignatureInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := exampleMessage()
			require.NoError(t, pigeon.SignMessage(m, "k1", priv))
			tt.edit(m)
			err := pigeon.VerifyMessage(m, tt.pub)
			require.Equal(t, tt.code, pigeon.ErrorCode(err), "%v", err)
			if err != nil {
				var pe *pigeon.Error
				require.ErrorAs(t, err, &pe)
				require.ErrorIs(t, err, pigeon.ErrDenied)
			}
		})
	}
}

const base64Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

func TestSignMessageFillsIDAndTime(t *testing.T) {
	m := &pigeon.Message{Subject: "chat.messages", Data: json.RawMessage(`{"room":"lobby"}`)}
	before := time.Now().Add(-time.Second)
	require.NoError(t, pigeon.SignMessage(m, "k1", exampleKey()))
	require.True(t, strings.HasPrefix(m.ID, "msg_"), m.ID)
	at, err := time.Parse(time.RFC3339Nano, m.Time)
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(m.Time, "Z"))
	require.WithinRange(t, at, before, time.Now().Add(time.Second))
	require.NoError(t, pigeon.VerifyMessage(m, exampleKey().Public().(ed25519.PublicKey)))

	// A message that goes through the JSON envelope still verifies.
	b, err := json.Marshal(m)
	require.NoError(t, err)
	back, err := pigeon.DecodeMessage(b)
	require.NoError(t, err)
	require.NoError(t, pigeon.VerifyMessage(back, exampleKey().Public().(ed25519.PublicKey)))
}

func TestSignMessageErrors(t *testing.T) {
	tests := []struct {
		name string
		edit func(m *pigeon.Message)
		kid  string
		priv ed25519.PrivateKey
		code pigeon.Code
	}{
		{"short key", func(*pigeon.Message) {}, "k1", exampleKey()[:32], pigeon.CodeInvalidArgument},
		{"empty kid", func(*pigeon.Message) {}, "", exampleKey(), pigeon.CodeInvalidArgument},
		{"kid with space", func(*pigeon.Message) {}, "k 1", exampleKey(), pigeon.CodeInvalidArgument},
		{"bad time", func(m *pigeon.Message) { m.Time = "yesterday" }, "k1", exampleKey(), pigeon.CodeEnvelopeInvalid},
		{"no subject", func(m *pigeon.Message) { m.Subject = "" }, "k1", exampleKey(), pigeon.CodeEnvelopeInvalid},
		{"bad data", func(m *pigeon.Message) { m.Data = json.RawMessage(`{"a":"\ud800"}`) }, "k1", exampleKey(), pigeon.CodeEnvelopeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := exampleMessage()
			m.ID, m.Time = "", ""
			tt.edit(m)
			want := m.Clone()
			err := pigeon.SignMessage(m, tt.kid, tt.priv)
			require.Equal(t, tt.code, pigeon.ErrorCode(err), "%v", err)
			require.Equal(t, want, m, "m is unchanged on failure")
		})
	}
	require.Equal(t, pigeon.CodeInvalidArgument, pigeon.ErrorCode(pigeon.SignMessage(nil, "k1", exampleKey())))
	require.Equal(t, pigeon.CodeSignatureRequired, pigeon.ErrorCode(pigeon.VerifyMessage(nil, nil)))
}

func TestVerifyMessageWithKeysRotation(t *testing.T) {
	rotation := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	_, oldPriv, _ := ed25519.GenerateKey(nil)
	_, newPriv, _ := ed25519.GenerateKey(nil)
	// An enc key listed under the kid of a signature its bytes would verify
	// must not be used. Its bytes are an Ed25519 key that is also a
	// canonical X25519 key (top bit clear), as a published enc key must be.
	var encPriv ed25519.PrivateKey
	for encPriv == nil || encPriv[ed25519.PrivateKeySize-1]&0x80 != 0 {
		_, encPriv, _ = ed25519.GenerateKey(nil)
	}
	oldKey := pigeon.Ed25519PublicKey("sig-old", oldPriv.Public().(ed25519.PublicKey))
	oldKey.NotAfter = rotation
	newKey := pigeon.Ed25519PublicKey("sig-new", newPriv.Public().(ed25519.PublicKey))
	newKey.NotBefore = rotation
	encKey := pigeon.X25519PublicKey("enc-1", encPriv.Public().(ed25519.PublicKey))
	keys := []pigeon.PublicKey{encKey, oldKey, newKey}
	require.NoError(t, pigeon.ValidateKeys(keys))

	tests := []struct {
		name string
		time string
		kid  string
		priv ed25519.PrivateKey
		code pigeon.Code
	}{
		{"old key, old message", "2026-10-31T23:59:59.999Z", "sig-old", oldPriv, pigeon.CodeOK},
		{"new key, new message", "2026-11-01T00:00:00.000Z", "sig-new", newPriv, pigeon.CodeOK},
		{"old key after rotation", "2026-11-01T00:00:00.000Z", "sig-old", oldPriv, pigeon.CodeSignatureInvalid},
		{"new key before its window", "2026-10-31T23:59:59.999Z", "sig-new", newPriv, pigeon.CodeSignatureInvalid},
		{"kid names the other key", "2026-11-02T00:00:00Z", "sig-new", oldPriv, pigeon.CodeSignatureInvalid},
		{"unknown kid", "2026-11-02T00:00:00Z", "sig-x", newPriv, pigeon.CodeSignatureInvalid},
		{"enc key is not a signing key", "2026-11-02T00:00:00Z", "enc-1", encPriv, pigeon.CodeSignatureInvalid},
		{"time with offset", "2026-11-01T01:00:00+02:00", "sig-old", oldPriv, pigeon.CodeOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := exampleMessage()
			m.Time = tt.time
			require.NoError(t, pigeon.SignMessage(m, tt.kid, tt.priv))
			err := pigeon.VerifyMessageWithKeys(m, keys)
			require.Equal(t, tt.code, pigeon.ErrorCode(err), "%v", err)
		})
	}

	m := exampleMessage()
	require.Equal(t, pigeon.CodeSignatureRequired, pigeon.ErrorCode(pigeon.VerifyMessageWithKeys(m, keys)))
	require.NoError(t, pigeon.SignMessage(m, "sig-new", newPriv))
	m.Time = "not a time"
	require.Equal(t, pigeon.CodeSignatureInvalid, pigeon.ErrorCode(pigeon.VerifyMessageWithKeys(m, keys)))
}

func TestSelectKey(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	kp, err := seal.GenerateKeys()
	require.NoError(t, err)
	k := func(kid, use string, nb, na int) pigeon.PublicKey {
		p := pigeon.Ed25519PublicKey(kid, kp.SigningPublic)
		if use == pigeon.UseEnc {
			p = pigeon.X25519PublicKey(kid, kp.EncryptionPublic)
		}
		if nb > 0 {
			p.NotBefore = t0.AddDate(0, nb, 0)
		}
		if na > 0 {
			p.NotAfter = t0.AddDate(0, na, 0)
		}
		return p
	}
	keys := []pigeon.PublicKey{
		k("s1", "sig", 0, 6), k("s2", "sig", 6, 0),
		k("e1", "enc", 0, 0), k("e2", "enc", 3, 0), k("e3", "enc", 3, 0), k("e4", "enc", 9, 12),
	}
	tests := []struct {
		name, kid, use string
		month          int
		want           string // "" = none
	}{
		{"kid, in window", "s1", "sig", 5, "s1"},
		{"kid, window closed", "s1", "sig", 6, ""},
		{"kid, not yet valid", "s2", "sig", 5, ""},
		{"kid, wrong use", "s1", "enc", 1, ""},
		{"kid, any use", "e1", "", 1, "e1"},
		{"unknown kid", "zz", "sig", 1, ""},
		{"newest sig", "", "sig", 7, "s2"},
		{"newest enc, only one valid", "", "enc", 1, "e1"},
		{"newest enc, last listed among equals", "", "enc", 4, "e3"},
		{"newest enc, latest notBefore", "", "enc", 10, "e4"},
		{"newest enc, expired newest skipped", "", "enc", 13, "e3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := pigeon.SelectKey(keys, tt.kid, tt.use, t0.AddDate(0, tt.month, 0))
			require.Equal(t, tt.want != "", ok)
			require.Equal(t, tt.want, got.KID)
		})
	}
	_, ok := pigeon.SelectKey(nil, "", "", t0)
	require.False(t, ok)
}

func TestPublicKey(t *testing.T) {
	priv := exampleKey()
	pub := priv.Public().(ed25519.PublicKey)
	x := bytes.Repeat([]byte{9}, 32)
	sig := pigeon.Ed25519PublicKey("sig-1", pub)
	enc := pigeon.X25519PublicKey("enc-1", x)

	got, err := sig.Ed25519()
	require.NoError(t, err)
	require.Equal(t, pub, got)
	gotX, err := enc.X25519()
	require.NoError(t, err)
	require.Equal(t, x, gotX)
	_, err = sig.X25519()
	require.Equal(t, pigeon.CodeInvalidArgument, pigeon.ErrorCode(err))
	_, err = enc.Ed25519()
	require.Equal(t, pigeon.CodeInvalidArgument, pigeon.ErrorCode(err))

	// JSON: zero times are left out; set ones are RFC 3339.
	b, err := json.Marshal(sig)
	require.NoError(t, err)
	require.JSONEq(t, `{"kid":"sig-1","use":"sig","alg":"ed25519","key":"`+docPublicKey+`"}`, string(b))
	sig.NotBefore = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	b, err = json.Marshal(sig)
	require.NoError(t, err)
	require.JSONEq(t, `{"kid":"sig-1","use":"sig","alg":"ed25519","key":"`+docPublicKey+`","notBefore":"2026-11-01T00:00:00Z"}`, string(b))
	var back pigeon.PublicKey
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, sig, back)

	// ValidAt is [NotBefore, NotAfter).
	w := pigeon.PublicKey{NotBefore: sig.NotBefore, NotAfter: sig.NotBefore.Add(time.Hour)}
	require.False(t, w.ValidAt(sig.NotBefore.Add(-time.Nanosecond)))
	require.True(t, w.ValidAt(sig.NotBefore))
	require.True(t, w.ValidAt(sig.NotBefore.Add(time.Hour-time.Nanosecond)))
	require.False(t, w.ValidAt(sig.NotBefore.Add(time.Hour)))
	require.True(t, pigeon.PublicKey{}.ValidAt(time.Time{}))
}

func TestPublicKeyValidate(t *testing.T) {
	good := pigeon.Ed25519PublicKey("sig-1", exampleKey().Public().(ed25519.PublicKey))
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		edit func(k *pigeon.PublicKey)
		ok   bool
	}{
		{"signing key", func(*pigeon.PublicKey) {}, true},
		{"encryption key", func(k *pigeon.PublicKey) {
			*k = pigeon.X25519PublicKey(k.KID, append([]byte{9}, make([]byte, 31)...)) // the base point
		}, true},
		{"window", func(k *pigeon.PublicKey) { k.NotBefore, k.NotAfter = t0, t0.Add(time.Second) }, true},
		{"empty window", func(k *pigeon.PublicKey) { k.NotBefore, k.NotAfter = t0, t0 }, false},
		{"no kid", func(k *pigeon.PublicKey) { k.KID = "" }, false},
		{"long kid", func(k *pigeon.PublicKey) { k.KID = strings.Repeat("k", 129) }, false},
		{"kid with control", func(k *pigeon.PublicKey) { k.KID = "k\n" }, false},
		{"unknown use", func(k *pigeon.PublicKey) { k.Use = "both" }, false},
		{"sig with x25519", func(k *pigeon.PublicKey) { k.Alg = "x25519" }, false},
		{"enc with ed25519", func(k *pigeon.PublicKey) { k.Use = "enc" }, false},
		{"short key", func(k *pigeon.PublicKey) { k.Key = k.Key[:20] }, false},
		{"padded key", func(k *pigeon.PublicKey) { k.Key += "=" }, false},
		{"std base64 key", func(k *pigeon.PublicKey) {
			k.Key = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 32))
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := good
			tt.edit(&k)
			err := k.Validate()
			if tt.ok {
				require.NoError(t, err)
				return
			}
			require.Equal(t, pigeon.CodeInvalidArgument, pigeon.ErrorCode(err), "%v", err)
		})
	}
	require.Error(t, pigeon.ValidateKeys([]pigeon.PublicKey{good, good}))
	require.NoError(t, pigeon.ValidateKeys(nil))

	many := make([]pigeon.PublicKey, pigeon.MaxAccountKeys+1)
	for i := range many {
		many[i] = good
		many[i].KID = "k" + strconv.Itoa(i)
	}
	require.NoError(t, pigeon.ValidateKeys(many[:pigeon.MaxAccountKeys]))
	err := pigeon.ValidateKeys(many)
	require.Equal(t, pigeon.CodeInvalidArgument, pigeon.ErrorCode(err), "%v", err)
}

func ExampleSignMessage() {
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		panic(err)
	}
	m := &pigeon.Message{Subject: "chat.messages", Data: json.RawMessage(`{"room":"lobby","text":"hi"}`)}
	if err := pigeon.SignMessage(m, "sig-2026-11", priv); err != nil {
		panic(err)
	}
	fmt.Println(m.Signature.KID, m.Signature.Alg, len(m.Signature.Sig))

	// The recipient verifies with the sender's published key.
	keys := []pigeon.PublicKey{pigeon.Ed25519PublicKey("sig-2026-11", priv.Public().(ed25519.PublicKey))}
	fmt.Println(pigeon.VerifyMessageWithKeys(m, keys))

	m.Data = json.RawMessage(`{"room":"kitchen","text":"hi"}`)
	err = pigeon.VerifyMessageWithKeys(m, keys)
	fmt.Println(pigeon.ErrorCode(err), errors.Is(err, pigeon.ErrDenied))
	// Output:
	// sig-2026-11 ed25519 86
	// <nil>
	// SIGNATURE_INVALID true
}

func BenchmarkSignMessage(b *testing.B) {
	priv := exampleKey()
	m := exampleMessage()
	b.ReportAllocs()
	for b.Loop() {
		m.Signature = nil
		if err := pigeon.SignMessage(m, "sig-2026-11", priv); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyMessage(b *testing.B) {
	priv := exampleKey()
	pub := priv.Public().(ed25519.PublicKey)
	m := exampleMessage()
	require.NoError(b, pigeon.SignMessage(m, "sig-2026-11", priv))
	b.Run("key", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := pigeon.VerifyMessage(m, pub); err != nil {
				b.Fatal(err)
			}
		}
	})
	keys := []pigeon.PublicKey{pigeon.Ed25519PublicKey("sig-2026-11", pub)}
	b.Run("keys", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := pigeon.VerifyMessageWithKeys(m, keys); err != nil {
				b.Fatal(err)
			}
		}
	})
}
