package ws

import (
	"encoding/json"
	"testing"

	"pigeon"
)

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
