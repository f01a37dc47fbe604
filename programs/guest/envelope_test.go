package guest

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	m := Message{ID: "msg_1", Type: "t", Source: "spiffe://x/y", Subject: "a.b", Time: "2026-01-01T00:00:00Z", Intent: "record",
		IdempotencyKey: "k", Classification: "pii", Region: "uk", Data: json.RawMessage(`{"a":[1,"x\"y",{"b":null}],"c":"\u00e9"}`),
		ReplyTo: "r", CorrelationID: "c", Reason: "why \"quoted\"\n\ttab \u2028 é \U0001F600", Sequence: 42}
	b, err := appendMessage(nil, &m)
	require.NoError(t, err)
	var viaJSON Message
	require.NoError(t, json.Unmarshal(b, &viaJSON))
	require.Equal(t, m, viaJSON, "encoding/json reads what appendMessage writes")
	std, err := json.Marshal(&m)
	require.NoError(t, err)
	var got Message
	require.NoError(t, decodeMessage(std, &got))
	require.Equal(t, m, got, "decodeMessage reads what encoding/json writes")
	require.Error(t, decodeMessage([]byte(`{"id":`), &got))
	require.Error(t, decodeMessage([]byte(`[1]`), &got))
	_, err = appendMessage(nil, &Message{Data: json.RawMessage(`{`)})
	require.Error(t, err)
}

// FuzzEnvelope: decodeMessage reads every envelope encoding/json writes
// as encoding/json reads it, and never panics on any input;
// appendMessage writes what encoding/json reads back unchanged.
func FuzzEnvelope(f *testing.F) {
	f.Add("msg_1", "a.b", "x\"\\\n\u2028", `{"k":[1,2,{"z":"\ud83d\ude00"}]}`, uint64(7))
	f.Add("", "", "\xff\xfe", `null`, uint64(0))
	f.Fuzz(func(t *testing.T, id, subject, text, data string, seq uint64) {
		var got Message
		_ = decodeMessage([]byte(data), &got) // any input: no panic
		if !utf8.ValidString(id) || !utf8.ValidString(subject) || !utf8.ValidString(text) {
			return // encoding/json replaces invalid UTF-8: not a round trip
		}
		m := Message{ID: id, Subject: subject, Reason: text, Sequence: seq}
		if json.Valid([]byte(data)) {
			var compact []byte
			if c, err := json.Marshal(json.RawMessage(data)); err == nil {
				compact = c
			}
			m.Data = compact
		}
		std, err := json.Marshal(&m)
		require.NoError(t, err)
		got = Message{}
		require.NoError(t, decodeMessage(std, &got), "%s", std)
		require.Equal(t, m, got)
		b, err := appendMessage(nil, &m)
		require.NoError(t, err)
		var back Message
		require.NoError(t, json.Unmarshal(b, &back), "%s", b)
		require.Equal(t, m, back)
	})
}
