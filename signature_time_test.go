package pigeon_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"pigeon/demo"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// signWithTime signs m over its canonical form as any client would, with
// m.Time as it is: SignMessage itself may refuse the time.
func signWithTime(t *testing.T, m *pigeon.Message, kid string, priv ed25519.PrivateKey) {
	in, err := pigeon.CanonicalSigningInput(m)
	require.NoError(t, err)
	m.Signature = &pigeon.Signature{KID: kid, Alg: pigeon.AlgEd25519, Sig: base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, in)), V: pigeon.SignatureV2}
}

// notRFC3339Times are times Go's time.Parse(time.RFC3339Nano) accepts but
// RFC 3339 does not (its time-secfrac is "." digits, time-numoffset's
// hour 00-23 and minute 00-59). The TypeScript client (Node's Date.parse)
// gives NaN for each; Python and Rust also refuse the comma, Python the
// 24-hour offset. The key that verifies a signature is chosen by the
// message time, so the broker would admit a signed message whose signature
// no receiver in another language verifies.
var notRFC3339Times = []string{
	"2026-11-29T12:00:00,5Z", // comma fraction
	"2026-11-29T12:00:00,000+01:00",
	"2026-11-29T12:00:00+00:60", // offset minute 60
	"2026-11-29T12:00:00.000-01:60",
	"2026-11-29T12:00:00+24:00", // offset hour 24
}

// TestSignatureTimeIsRFC3339: a signature verifies only for a message time
// in RFC 3339 syntax proper, which every client parses to the same
// instant, and SignMessage signs no other: the signature gate must not
// admit a signature that receivers refuse.
func TestSignatureTimeIsRFC3339(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	keys := []pigeon.PublicKey{pigeon.Ed25519PublicKey("k1", pub)}
	msg := func(tm string) *pigeon.Message {
		return &pigeon.Message{ID: "msg_1", Subject: "signed.events", Time: tm, Data: json.RawMessage(`{"n":1}`)}
	}
	for _, tm := range notRFC3339Times {
		t.Run(tm, func(t *testing.T) {
			m := msg(tm)
			signWithTime(t, m, "k1", priv)
			require.NoError(t, pigeon.VerifyMessage(m, pub), "the raw signature is sound")
			requireCode(t, pigeon.VerifyMessageWithKeys(m, keys), pigeon.CodeSignatureInvalid)
			requireCode(t, pigeon.SignMessage(msg(tm), "k1", priv), pigeon.CodeEnvelopeInvalid)
		})
	}
	for _, tm := range []string{
		"2026-11-29T12:00:00Z",
		"2026-11-29T12:00:00.000Z",
		"2026-11-29T12:00:00.123456789012Z",
		"2026-11-29T12:00:00.5+01:00",
		"2026-11-29T12:00:00-00:00",
		"2026-11-29T12:00:00+23:59",
		"2026-11-29T12:00:00.000-23:59",
	} {
		t.Run(tm, func(t *testing.T) {
			m := msg(tm)
			require.NoError(t, pigeon.SignMessage(m, "k1", priv))
			require.NoError(t, pigeon.VerifyMessageWithKeys(m, keys))
		})
	}
}

// TestSignatureGateRefusesNonRFC3339Time: such a message is refused on a
// subject that requires signatures: by the envelope gate, which comes
// first and takes RFC 3339 proper only (TestPublishedTimeIsRFC3339), and
// the signature gate, which verifies with VerifyMessageWithKeys, would
// refuse it too (TestSignatureTimeIsRFC3339).
func TestSignatureGateRefusesNonRFC3339Time(t *testing.T) {
	f := integrityFixture(t)
	_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: signer})
	require.NoError(t, err)
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	_, err = f.e.PutAccountKeys(ctx, signer, []pigeon.PublicKey{pigeon.Ed25519PublicKey("k1", pub)})
	require.NoError(t, err)
	s := f.connect("signer-token", "signed.events")
	for i, tm := range notRFC3339Times {
		m := &pigeon.Message{Type: "t", Subject: "signed.events", Intent: "tell", ID: "msg_time_" + string(rune('a'+i)), Time: tm, Data: json.RawMessage(`{"n":1}`)}
		signWithTime(t, m, "k1", priv)
		_, err := s.Publish(ctx, m)
		requireCode(t, err, pigeon.CodeEnvelopeInvalid)
	}
	m := &pigeon.Message{Type: "t", Subject: "signed.events", Intent: "tell", Data: json.RawMessage(`{"n":1}`)}
	require.NoError(t, pigeon.SignMessage(m, "k1", priv))
	_, err = s.Publish(ctx, m)
	require.NoError(t, err)
}

// TestPublishedTimeIsRFC3339: the envelope gate takes a message's own time
// in RFC 3339 syntax proper only, signed or not, and at most
// MaxEnvelopeField bytes of it: Go's parser alone took a comma before the
// fraction, offsets of 24 hours or 60 minutes, and any number of fraction
// digits (100 KB of them passed every field bound), which receivers in
// other languages refuse.
func TestPublishedTimeIsRFC3339(t *testing.T) {
	f := newFixture(t)
	orders := f.connect("orders-token", "notifications.send")
	bad := append(slices.Clone(notRFC3339Times), "2026-11-29T12:00:00."+strings.Repeat("1", 100_000)+"Z")
	for i, tm := range bad {
		m := demo.Notification(fmt.Sprintf("bad-%d", i))
		m.Time = tm
		_, err := orders.Publish(ctx, m)
		requireCode(t, err, pigeon.CodeEnvelopeInvalid)
	}
	for i, tm := range []string{"2026-11-29T12:00:00Z", "2026-11-29T12:00:00.123456789+01:00", "2026-11-29T12:00:00-23:59"} {
		m := demo.Notification(fmt.Sprintf("good-%d", i))
		m.Time = tm
		res, err := orders.Publish(ctx, m)
		require.NoError(t, err, tm)
		require.Equal(t, tm, res.Message.Time, "the time is kept as sent")
	}
}
