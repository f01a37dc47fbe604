package ws

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestPulledAnswerCarriesAttempts: a receive's answer holds "attempts" in
// step with "messages" when a message is leased, and none otherwise; the
// client's decoders (the strict walk, and encoding/json behind it) read
// it alike, and a walk that cannot (a negative or oversized attempt)
// gives the frame up to encoding/json.
func TestPulledAnswerCarriesAttempts(t *testing.T) {
	m := &pigeon.Message{SpecVersion: "1.0", ID: "msg_1", Type: "t", Subject: "s", Intent: "i", Data: json.RawMessage(`{"a":1}`), Sequence: 3}
	cases := []struct {
		name     string
		msgs     []*pigeon.Message
		attempts []int
		want     []int
	}{
		{"leased", []*pigeon.Message{m, m}, []int{1, 2}, []int{1, 2}},
		{"pubsub", []*pigeon.Message{m}, []int{0}, nil},
		{"none", nil, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := appendPulled(appendHead(nil, OpMessages, "r"), tc.msgs, tc.attempts)
			require.True(t, json.Valid(b), "%s", b)
			f, ok := decodeFrameStrict(b, &interner{})
			require.True(t, ok, "the strict walk takes %s", b)
			require.Equal(t, tc.want, f.Attempts)
			require.Len(t, f.Messages, len(tc.msgs))
			requireStrictSound(t, b)
		})
	}
	for _, in := range []string{
		`{"op":"messages","re":"r","messages":[],"attempts":[-1]}`,
		`{"op":"messages","re":"r","messages":[],"attempts":[4294967296]}`,
		`{"op":"messages","re":"r","messages":[],"attempts":[1.5]}`,
		`{"op":"ack","id":"a","subject":"jobs.run","messageId":"m","sequence":1,"attempt":2}`,
	} {
		requireStrictSound(t, []byte(in))
	}
}
