package pigeon_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestMessageIDIsText: a publisher-chosen message id holds no control
// character. Ids are joined by newlines in the digest of a delivery
// record (the ids of "a\nb","c" and of "a","b\nc" would give one digest),
// and are lines of the audit log's text form; an id is a name, never
// more than one line. Refused ENVELOPE_INVALID naming the id.
func TestMessageIDIsText(t *testing.T) {
	for _, tc := range []struct {
		name, id string
		ok       bool
	}{
		{"a newline", "a\nb", false},
		{"a carriage return", "a\rb", false},
		{"NUL", "a\x00b", false},
		{"DEL", "a\x7fb", false},
		{"a C1 control", "a\u0085b", false},
		{"a tab", "a\tb", false},
		{"letters, digits and punctuation", "order-42:v1/é", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := chatEngine(t)
			s := chatSession(t, e, "alice-token", "chat.messages")
			m := chat(1)
			m.ID = tc.id
			res, err := s.Publish(ctx, m)
			if tc.ok {
				require.NoError(t, err)
				require.Equal(t, tc.id, res.Message.ID)
				return
			}
			requireCode(t, err, pigeon.CodeEnvelopeInvalid)
			require.Contains(t, err.Error(), "id")
		})
	}
}
