package ws

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"

	"github.com/coder/websocket"
)

// Read buffers. A server connection keeps a buffer of at most
// maxKeptBuffer between frames: thousands of connections must not each pin
// a large frame's memory. A frame larger than that (a publish_batch of
// hundreds of messages) is read into a large buffer from largeBufs, which
// goes back there once the next frame is read, so that large frames do not
// each grow a fresh buffer, and unused large buffers are let go by the
// garbage collector as sync.Pool lets go of anything. A client session has
// one connection and keeps up to clientKeptBuffer itself.
const (
	maxKeptBuffer    = 64 << 10
	clientKeptBuffer = 4 << 20
	minReadBuffer    = 4 << 10
)

var largeBufs sync.Pool // of *[]byte, empty, larger than maxKeptBuffer

// frameBuf is one connection's read buffer. One goroutine uses it.
type frameBuf struct {
	keep  int    // the most the connection keeps of its own
	own   []byte // its own buffer, at most keep bytes
	frame []byte // the frame last read, in own or a large buffer
}

// read reads the next whole message from ws and returns its type; its
// bytes are in fb.frame until the next read.
func (fb *frameBuf) read(ctx context.Context, ws *websocket.Conn) (websocket.MessageType, error) {
	typ, r, err := ws.Reader(ctx)
	if err != nil {
		return typ, err
	}
	if cap(fb.frame) > fb.keep {
		large := fb.frame[:0]
		largeBufs.Put(&large)
	}
	b := fb.own[:0]
	for {
		if len(b) == cap(b) {
			b = fb.grow(b)
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fb.frame = nil
			return typ, err
		}
	}
	if cap(b) <= fb.keep {
		fb.own = b
	}
	fb.frame = b
	return typ, nil
}

// grow makes room in b, which is full: twice its size, from a large
// buffer of the pool when that is past what the connection keeps.
func (fb *frameBuf) grow(b []byte) []byte {
	want := max(2*cap(b), minReadBuffer)
	if want > fb.keep {
		if p, _ := largeBufs.Get().(*[]byte); p != nil && cap(*p) >= want {
			return append((*p)[:0], b...)
		}
	}
	return slices.Grow(b, want-len(b))
}
