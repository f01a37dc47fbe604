package ws

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestWriteOwnStallTimeout: a frame that send writes itself to a peer
// that stopped reading fails within about the stall timeout and aborts
// the connection, as the write under a deadline did; one that goes out
// leaves the connection alone, even once its timer's time has passed. The
// abort is counted in Stats.Stalled, as a stall of the queue is.
func TestWriteOwnStallTimeout(t *testing.T) {
	accepted := make(chan *websocket.Conn, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wsc, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		accepted <- wsc // hijacked: it outlives the handler
	}))
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	peer, _, err := websocket.Dial(ctx, hs.URL, nil) // never reads
	require.NoError(t, err)
	t.Cleanup(func() { _ = peer.CloseNow() })
	wsc := <-accepted
	t.Cleanup(func() { _ = wsc.CloseNow() })

	const stall = 200 * time.Millisecond
	srv := NewServer(nil, &Options{StallTimeout: stall})
	c := newConn(context.Background(), srv, wsc, nil, &pigeon.Principal{ID: "crew"}, "uk")

	c.wmu.Lock()
	require.NoError(t, c.writeOwn([]byte(`{"op":"ok","re":"1"}`)))
	c.wmu.Unlock()
	time.Sleep(2 * stall) // the timer of a write that ended does nothing
	require.NoError(t, c.ctx.Err())
	require.Zero(t, srv.Stats().Stalled)

	big := make([]byte, 64<<20) // more than the socket buffers hold
	start := time.Now()
	c.wmu.Lock()
	err = c.writeOwn(big)
	c.wmu.Unlock()
	require.Error(t, err)
	require.Less(t, time.Since(start), 20*stall)
	require.Error(t, c.ctx.Err(), "the connection is aborted")
	require.Equal(t, int64(1), srv.Stats().Stalled, "counted as a stall of the queue is")
}
