package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// rawWebSocket is the floor of any WebSocket broker: one coder/websocket
// connection on 127.0.0.1, a writer sending payload as text frames as fast
// as the connection takes them and a reader counting them; frames/s read.
func rawWebSocket(ctx context.Context, c config) (result, error) {
	var got atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		for {
			_, rd, err := conn.Reader(r.Context())
			if err != nil {
				return
			}
			if _, err := io.Copy(io.Discard, rd); err != nil {
				return
			}
			got.Add(1)
		}
	})
	url, stop, err := serveLocal(handler)
	if err != nil {
		return result{}, err
	}
	defer stop()
	conn, _, err := websocket.Dial(ctx, "ws://"+url, nil)
	if err != nil {
		return result{}, err
	}
	defer conn.CloseNow()
	return runLoad(ctx, c, func(ctx context.Context) error {
		for ctx.Err() == nil {
			if err := conn.Write(ctx, websocket.MessageText, payload); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
		return nil
	}, &got)
}

// serveLocal serves h over HTTP on 127.0.0.1 (a random port) and returns
// its host:port and a function that stops it.
func serveLocal(h http.Handler) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(l) // http.ErrServerClosed after stop
	}()
	return l.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if hs.Shutdown(ctx) != nil {
			_ = hs.Close()
		}
		<-done
	}, nil
}
