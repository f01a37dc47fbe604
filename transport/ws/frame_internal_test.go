package ws

import (
	"encoding/json"
	"testing"

	"pigeon"
)

// FuzzAppendString checks the hand-written JSON string encoder of the hot
// paths against encoding/json.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", `quote " back \ slash`, "<html>&", "ctl \x00\x1f\n\r\t", "\u2028\u2029", "bad \xff utf8", "é日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendString(nil, s); string(got) != string(want) {
			t.Fatalf("appendString(%q) = %s, want %s", s, got, want)
		}
	})
}

func TestHandBuiltFramesAreValidJSON(t *testing.T) {
	m := &pigeon.Message{SpecVersion: "1.0", ID: "msg_1", Type: "t", Subject: "s\"", Intent: "i", Data: json.RawMessage(`{"a":1}`), Sequence: 3}
	for _, b := range [][]byte{
		encodeDeliver(nil, "sub\"1", m, 2),
		encodeSimple(OpOK, "x\n"),
		encodeError("r", pigeon.NewError(pigeon.CodeBadRequest, "bad \"frame\"")),
		appendMessages(appendHead(nil, OpMessages, "m"), []*pigeon.Message{m, m}),
	} {
		if !json.Valid(b) {
			t.Fatalf("invalid frame %s", b)
		}
		if _, err := DecodeFrame(b); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	}
}
