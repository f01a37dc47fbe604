package pigeon

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestControlFieldAgreesByRunes: the envelope gate's printable-ASCII fast
// path names the same field as reading every name rune by rune, for a
// control or formatting character, DEL, a C1 control, text beyond ASCII
// that is allowed, at every field and at each end of a word of eight
// bytes, and another field already bad before it.
func TestControlFieldAgreesByRunes(t *testing.T) {
	values := []string{
		"", "payments.authorize", "x\x00", "\x1f", "a\x7f", "abcdefg\x7f", "abcdefgh\x7f", "\u0085", "\u00a0",
		"é", "ünïcödé-name", "\u202e", "abcdefg\u2028", "\u200d", "\u061c", "\ufeff", "tab\there", "0123456789abcdef\x1b",
	}
	set := []func(m *Message, v string){
		func(m *Message, v string) { m.Subject = v },
		func(m *Message, v string) { m.Type = v },
		func(m *Message, v string) { m.Intent = v },
		func(m *Message, v string) { m.IdempotencyKey = v },
		func(m *Message, v string) { m.Classification = v },
		func(m *Message, v string) { m.Region = v },
		func(m *Message, v string) { m.ReplyTo = v },
		func(m *Message, v string) { m.CorrelationID = v },
		func(m *Message, v string) { m.Signature = &Signature{KID: v, Alg: "ed25519", Sig: "c2ln"} },
		func(m *Message, v string) { m.Signature = &Signature{KID: "k", Alg: "ed25519", Sig: v} },
	}
	base := func() Message {
		return Message{Subject: "payments.authorize", Type: "payment", Intent: "authorize", Classification: "pci", Region: "uk"}
	}
	for i, f := range set {
		for _, v := range values {
			m := base()
			f(&m, v)
			require.Equal(t, controlFieldByRunes(&m), controlField(&m), "field %d = %q", i, v)
			for j, g := range set {
				for _, w := range []string{"\x01", "é", "\u2066"} {
					m2 := m
					g(&m2, w)
					require.Equal(t, controlFieldByRunes(&m2), controlField(&m2), "field %d = %q, field %d = %q", i, v, j, w)
				}
			}
		}
	}
}
