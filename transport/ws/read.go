package ws

import (
	"bytes"
	"context"

	"github.com/coder/websocket"
)

// maxKeptBuffer is the largest read buffer a connection keeps between
// frames.
const maxKeptBuffer = 64 << 10

// readMessage reads the next whole message from ws into buf, which the
// caller keeps between calls (a buffer grown past maxKeptBuffer is let go,
// so one large frame does not pin its memory), and returns its type.
func readMessage(ctx context.Context, ws *websocket.Conn, buf *bytes.Buffer) (websocket.MessageType, error) {
	typ, r, err := ws.Reader(ctx)
	if err != nil {
		return typ, err
	}
	if buf.Cap() > maxKeptBuffer {
		*buf = bytes.Buffer{}
	}
	buf.Reset()
	_, err = buf.ReadFrom(r)
	return typ, err
}
