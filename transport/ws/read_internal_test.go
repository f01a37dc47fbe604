package ws

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// TestFrameBuf: frames of every size, small and past what the connection
// keeps, arrive whole and in order over a real WebSocket, the buffer the
// connection keeps never grows past its bound, and a large buffer comes
// back from the pool for the next large frame.
func TestFrameBuf(t *testing.T) {
	sizes := []int{0, 10, minReadBuffer, minReadBuffer + 1, 3 * maxKeptBuffer, 5, 200 << 10, maxKeptBuffer, 1 << 20, 1}
	frame := func(i, n int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, n) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for i, n := range sizes {
			if c.Write(r.Context(), websocket.MessageText, frame(i, n)) != nil {
				return
			}
		}
		_, _, _ = c.Read(r.Context()) // until the client goes
	}))
	defer srv.Close()
	ctx := context.Background()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	require.NoError(t, err)
	defer c.CloseNow()
	c.SetReadLimit(2 << 20)
	fb := frameBuf{keep: maxKeptBuffer}
	for i, n := range sizes {
		typ, err := fb.read(ctx, c)
		require.NoError(t, err)
		require.Equal(t, websocket.MessageText, typ)
		require.Equal(t, frame(i, n), fb.frame, "frame %d of %d bytes", i, n)
		require.LessOrEqual(t, cap(fb.own), maxKeptBuffer)
	}
}
