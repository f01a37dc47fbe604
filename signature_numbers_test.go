package pigeon_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/jsontext"
)

// signRaw signs m as a signer following JCS alone would: Ed25519 over
// ["pigeon-sig-v1",subject,id,time,JCS(data)], without SignMessage's checks.
func signRaw(t *testing.T, m *pigeon.Message, priv ed25519.PrivateKey) {
	t.Helper()
	data, err := jsontext.Canonical(m.Data)
	require.NoError(t, err)
	head, err := json.Marshal([]string{pigeon.SigningContext, m.Subject, m.ID, m.Time})
	require.NoError(t, err)
	in := append(append(append(head[:len(head)-1:len(head)-1], ','), data...), ']')
	sig := ed25519.Sign(priv, in)
	m.Signature = &pigeon.Signature{KID: "k1", Alg: pigeon.AlgEd25519, Sig: base64.RawURLEncoding.EncodeToString(sig)}
}

// TestSignatureBindsNumbers: JCS reads numbers as doubles, so two data
// values whose numbers differ beyond a double's precision have one
// canonical form. A signature over such data would verify for both, while
// a receiver that reads integers exactly (an int64 account id, an amount in
// minor units, a decimal) acts on either: whoever carries the message could
// swap one for the other. Data is signed and verified only when each number
// is exactly the value its canonical form spells.
func TestSignatureBindsNumbers(t *testing.T) {
	priv := exampleKey()
	pub := priv.Public().(ed25519.PublicKey)
	refused := []struct {
		name      string
		data, alt string // alt: the same canonical form, the value it spells
	}{
		{"integer beyond 2^53", `{"amount":9007199254740993}`, `{"amount":9007199254740992}`},
		{"int64 id", `{"account":1234567890123456789}`, `{"account":1234567890123456800}`},
		{"more digits than a double", `{"x":0.10000000000000001}`, `{"x":0.1}`},
		{"underflow to zero", `{"x":1e-400}`, `{"x":0}`},
		{"negative underflow", `{"x":-1e-400}`, `{"x":-0}`},
		{"nested in an array", `{"a":[1,{"b":12345678901234567891}]}`, `{"a":[1,{"b":12345678901234567000}]}`},
		{"top-level number", `12345678901234567891`, `1.2345678901234567e19`},
		{"after a string with an escaped quote", `{"s":"\"1","n":9007199254740993}`, `{"s":"\"1","n":9007199254740992}`},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			c1, err := jsontext.Canonical([]byte(tt.data))
			require.NoError(t, err)
			c2, err := jsontext.Canonical([]byte(tt.alt))
			require.NoError(t, err)
			require.Equal(t, string(c1), string(c2), "the two texts share a canonical form")

			m := exampleMessage()
			m.Data = json.RawMessage(tt.data)
			err = pigeon.SignMessage(m, "k1", priv)
			require.Equal(t, pigeon.CodeEnvelopeInvalid, pigeon.ErrorCode(err), "%v", err)
			require.Nil(t, m.Signature)
			_, err = pigeon.CanonicalSigningInput(m)
			require.Equal(t, pigeon.CodeEnvelopeInvalid, pigeon.ErrorCode(err), "%v", err)

			// A signature another implementation made over the canonical
			// form verifies only with the data that spells its values: a
			// receiver never accepts data whose value it does not bind.
			signRaw(t, m, priv)
			err = pigeon.VerifyMessage(m, pub)
			require.Equal(t, pigeon.CodeSignatureInvalid, pigeon.ErrorCode(err), "%v", err)
			m.Data = json.RawMessage(tt.alt)
			require.NoError(t, pigeon.VerifyMessage(m, pub))
		})
	}

	// Numbers whose value the canonical form keeps sign and verify, in any
	// spelling of that value.
	kept := []struct{ name, data, respelled string }{
		{"1.0 and 1", `{"n":1.0}`, `{"n":1}`},
		{"exponent", `{"n":1e2}`, `{"n":100.000}`},
		{"0.1", `{"n":0.1}`, `{"n":1e-1}`},
		{"negative zero", `{"n":-0}`, `{"n":0}`},
		{"2^53", `{"n":9007199254740992}`, `{"n":9.007199254740992e15}`},
		{"large with trailing zeros", `{"n":12345678901234567000}`, `{"n":1.2345678901234567e19}`},
		{"1e21", `{"n":1e21}`, `{"n":1000000000000000000000}`},
		{"largest double", `{"n":1.7976931348623157e308}`, `{"n":17976931348623157e292}`},
		{"smallest subnormal", `{"n":5e-324}`, `{"n":0.5e-323}`},
		{"15 significant digits", `{"n":-123456789.012345}`, `{"n":-1.23456789012345e8}`},
		{"digits in strings", `{"s":"12345678901234567891","t":"\"9007199254740993\\"}`, `{"t":"\"9007199254740993\\","s":"12345678901234567891"}`},
	}
	for _, tt := range kept {
		t.Run(tt.name, func(t *testing.T) {
			m := exampleMessage()
			m.Data = json.RawMessage(tt.data)
			require.NoError(t, pigeon.SignMessage(m, "k1", priv))
			require.NoError(t, pigeon.VerifyMessage(m, pub))
			m.Data = json.RawMessage(tt.respelled)
			require.NoError(t, pigeon.VerifyMessage(m, pub))
		})
	}
}
