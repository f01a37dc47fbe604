package ws_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon/transport/ws"
)

// A Close whose context ends before the server answers the close
// handshake drops the connection then, whichever HTTP client dialed it:
// the session's own, whose reads and writes watch no context (the
// connection closes its socket as it ends), or a caller's, whose reads
// and writes watch the connection's context. Neither waits out the
// WebSocket library's own wait for the handshake (five seconds), nor
// leaves the connection's reader behind.
func TestCloseDropsAConnectionWhoseCloseIsNeverAnswered(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []ws.Option
	}{
		{"the session's HTTP client", nil},
		{"a caller's HTTP client", []ws.Option{ws.WithHTTPClient(&http.Client{})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := rawServer(t, func(ctx context.Context, c *websocket.Conn) {
				if negotiated(ctx, c) {
					<-ctx.Done() // reads nothing more: the close is never answered
				}
			})
			s, err := ws.Dial(context.Background(), url, "alice-token", []string{"chat.messages"}, tc.opts...)
			require.NoError(t, err)

			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			require.Error(t, s.Close(ctx), "the close is never answered")
			// A Close after one that gave up waits for its teardown: the
			// connection dropped, its goroutines ended.
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = s.Close(context.Background())
			}()
			within(t, done, "the teardown of a Close that gave up")
			require.Less(t, time.Since(start), 3*time.Second, "the teardown waited out the library's close handshake")
		})
	}
}
