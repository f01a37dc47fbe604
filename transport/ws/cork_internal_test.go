package ws

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
)

// recordConn is a net.Conn that records each write it is given.
type recordConn struct {
	net.Conn
	writes [][]byte
}

func (r *recordConn) Write(p []byte) (int, error) {
	r.writes = append(r.writes, bytes.Clone(p))
	return len(p), nil
}

// TestCorkConn: corked writes go out together and in order, a write that
// would pass the bound flushes first, and an uncorked connection holds no
// buffer.
func TestCorkConn(t *testing.T) {
	big := bytes.Repeat([]byte("x"), maxCork)
	for _, tt := range []struct {
		name   string
		writes [][]byte
		want   []string // the underlying writes, in order
	}{
		{"collected", [][]byte{[]byte("a"), []byte("bc")}, []string{"abc"}},
		{"bound reached", [][]byte{[]byte("a"), big[:maxCork-1], []byte("bc")}, []string{"a" + string(big[:maxCork-1]), "bc"}},
		{"exactly the bound", [][]byte{big}, []string{string(big)}},
		{"larger than the bound", [][]byte{[]byte("a"), append(big, 'y')}, []string{"a", string(big) + "y"}},
		{"nothing", nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rc := &recordConn{}
			c := &corkConn{Conn: rc}
			c.cork()
			for _, w := range tt.writes {
				n, err := c.Write(w)
				require.NoError(t, err)
				require.Equal(t, len(w), n)
			}
			require.NoError(t, c.uncork())
			require.Nil(t, c.buf, "an uncorked connection holds no buffer")
			got := make([]string, 0, len(rc.writes))
			for _, w := range rc.writes {
				got = append(got, string(w))
			}
			require.Equal(t, len(tt.want), len(got))
			for i := range tt.want {
				require.Equal(t, tt.want[i], got[i], "write %d", i)
			}
			// Uncorked, every write goes straight through.
			_, err := c.Write([]byte("z"))
			require.NoError(t, err)
			require.Equal(t, "z", string(rc.writes[len(rc.writes)-1]))
			require.Nil(t, c.buf)
		})
	}
}

// countConn is a net.Conn that counts the writes it is given.
type countConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// counted puts a countConn under cc's writes.
func counted(cc *corkConn) *countConn {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	w := &countConn{Conn: cc.Conn}
	cc.Conn = w
	return w
}

// TestLargeFrameOneWrite: a frame larger than the WebSocket library's
// write buffer that goes out on its own, written by a caller without the
// writer loop (a client's call, a server's answer), leaves in one system
// call, not in one per 4 KiB (a client's frame is masked piece by piece
// in that buffer) or two (a server's); the peer reads it whole.
func TestLargeFrameOneWrite(t *testing.T) {
	frame := []byte(`{"op":"ping","id":"` + strings.Repeat("x", 64<<10) + `"}`)
	type side struct {
		wsc *websocket.Conn
		cc  *corkConn
	}
	accepted := make(chan side, 1)
	read := make(chan []byte, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &corkWriter{ResponseWriter: w}
		wsc, err := websocket.Accept(cw, r, nil)
		if err != nil {
			return
		}
		wsc.SetReadLimit(1 << 20)
		accepted <- side{wsc, cw.cc}
		go func() {
			_, b, err := wsc.Read(context.Background())
			if err == nil {
				read <- b
			}
		}()
		t.Cleanup(func() { _ = wsc.CloseNow() })
	}))
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cork atomic.Pointer[corkConn]
	peer, _, err := websocket.Dial(ctx, hs.URL, &websocket.DialOptions{HTTPClient: corkClient(&cork, nil)})
	require.NoError(t, err)
	peer.SetReadLimit(1 << 20)
	t.Cleanup(func() { _ = peer.CloseNow() })
	srvSide := <-accepted

	t.Run("client", func(t *testing.T) {
		w := counted(cork.Load())
		cc := &clientConn{ws: peer, cork: cork.Load(), io: ctx, out: make(chan []byte, 1), done: make(chan struct{})}
		require.NoError(t, cc.send(ctx, frame))
		require.Equal(t, int64(1), w.writes.Load(), "one write for the frame")
		require.Equal(t, frame, <-read)
	})
	t.Run("server", func(t *testing.T) {
		w := counted(srvSide.cc)
		c := newConn(context.Background(), NewServer(nil, nil), srvSide.wsc, srvSide.cc, &pigeon.Principal{ID: "crew"}, "uk")
		c.wmu.Lock()
		err := c.writeOwn(frame)
		c.wmu.Unlock()
		require.NoError(t, err)
		require.Equal(t, int64(1), w.writes.Load(), "one write for the frame")
		_, b, err := peer.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, frame, b)
	})
}
