package ws

import (
	"bytes"
	"context"

	"github.com/coder/websocket"
)

// maxKeptBuffer is the largest read buffer a server connection keeps
// between frames: thousands of connections must not each pin a large
// frame's memory. A client session has one connection and keeps up to
// clientKeptBuffer, so that the server's decisions and deliveries frames
// for large batches (hundreds of KiB) are read without growing a fresh
// buffer each time.
const (
	maxKeptBuffer    = 64 << 10
	clientKeptBuffer = 4 << 20
)

// readMessage reads the next whole message from ws into buf, which the
// caller keeps between calls (a buffer grown past keep bytes is let go, so
// one large frame does not pin its memory), and returns its type.
func readMessage(ctx context.Context, ws *websocket.Conn, buf *bytes.Buffer, keep int) (websocket.MessageType, error) {
	typ, r, err := ws.Reader(ctx)
	if err != nil {
		return typ, err
	}
	if buf.Cap() > keep {
		*buf = bytes.Buffer{}
	}
	buf.Reset()
	_, err = buf.ReadFrom(r)
	return typ, err
}
