package ws_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// TestLongFrameIDsAreRefused: every answer echoes its frame's id, escaped
// as JSON escapes it, where a '<' takes six bytes, and up to 256 frames
// of a connection are worked on at once, each answer built before it
// waits for room in the write queue. A client that sent frames with ids
// of '<' filling the frame and read nothing made the server hold each id
// and an answer six times the frame: about 1.8 GiB a connection on the
// default 1 MiB frame, for the stall timeout, and again on the next
// connection. An id longer than 256 bytes is now refused BAD_REQUEST
// without an "re", before the frame is worked on.
func TestLongFrameIDsAreRefused(t *testing.T) {
	v := newEnv(t, nil)
	r := v.raw(t, "alice-token")
	r.negotiate("chat.messages")
	for _, tc := range []struct {
		name, frame string
		code        pigeon.Code
	}{
		{"worked on aside", `{"op":"subscribe","id":"` + strings.Repeat("<", 100<<10) + `","subject":"no.such"}`, pigeon.CodeBadRequest},
		{"answered inline", `{"op":"ping","id":"` + strings.Repeat("<", 257) + `"}`, pigeon.CodeBadRequest},
		{"refused at decoding", `{"op":"ping","id":"` + strings.Repeat("<", 100<<10) + `","x":1,"x":2}`, pigeon.CodeDuplicateKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.write(tc.frame)
			f := r.next()
			require.Equal(t, ws.OpError, f.Op)
			require.Zero(t, len(f.Re), "the id is not echoed")
			require.Equal(t, tc.code, f.Error.Code)
			r.ok(ws.OpPing, "", ws.OpPong) // the connection stays up
		})
	}
	id := strings.Repeat("<", 256)
	r.write(`{"op":"ping","id":"` + id + `"}`)
	require.True(t, r.answer(id).Re == id, "an id of 256 bytes is answered")
}
