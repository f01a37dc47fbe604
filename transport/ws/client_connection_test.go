package ws_test

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// dropConn, returned by a connServer script, ends the connection (without
// a close handshake) after the frames before it are written.
const dropConn = "\x00drop"

// connServer is a scriptedServer that tells the script which connection
// (1, 2, …) a frame came on, answers every negotiate with a contract
// itself, and records the frames it read.
type connServer struct {
	url    string
	conns  atomic.Int64
	mu     sync.Mutex
	frames []connFrame
}

// dial connects a session on chat.messages to the server and closes it
// with the test.
func (cs *connServer) dial(t *testing.T, opts ...ws.Option) *ws.Session {
	t.Helper()
	return dialChat(t, cs.url, opts...)
}

// dialChat connects a session on chat.messages to url and closes it with
// the test.
func dialChat(t *testing.T, url string, opts ...ws.Option) *ws.Session {
	t.Helper()
	s, err := ws.Dial(context.Background(), url, "token", []string{"chat.messages"}, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

type connFrame struct {
	conn int
	f    *ws.Frame
}

func newConnServer(t *testing.T, script func(conn int, f *ws.Frame) []string) *connServer {
	t.Helper()
	cs := &connServer{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{ws.Subprotocol}})
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(-1)
		n := int(cs.conns.Add(1))
		ctx := r.Context()
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			f, err := ws.DecodeFrame(b)
			if err != nil {
				return
			}
			cs.mu.Lock()
			cs.frames = append(cs.frames, connFrame{n, f})
			cs.mu.Unlock()
			var out []string
			if f.Op == ws.OpNegotiate {
				out = []string{`{"op":"contract","re":"` + f.ID + `","contract":{"id":"ctr_` + strconv.Itoa(n) + `","principal":"p","subjects":[]}}`}
			}
			out = append(out, script(n, f)...)
			for _, s := range out {
				if s == dropConn {
					return
				}
				if c.Write(ctx, websocket.MessageText, []byte(s)) != nil {
					return
				}
			}
		}
	}))
	t.Cleanup(hs.Close)
	cs.url = "ws" + strings.TrimPrefix(hs.URL, "http")
	return cs
}

// seen returns the frames of op read so far.
func (cs *connServer) seen(op string) []connFrame {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var out []connFrame
	for _, f := range cs.frames {
		if f.f.Op == op {
			out = append(out, f)
		}
	}
	return out
}

func okFrame(f *ws.Frame) string { return `{"op":"ok","re":"` + f.ID + `"}` }

func subscribedFrame(f *ws.Frame, sub string) string {
	return `{"op":"subscribed","re":"` + f.ID + `","sub":"` + sub + `"}`
}

// deliverSeq is a deliver frame of msg_<id> at sequence seq.
func deliverSeq(sub, id string, seq uint64) string {
	return `{"op":"deliver","sub":"` + sub + `","attempt":1,"message":{"specversion":"1.0","id":"msg_` + id +
		`","type":"chat","source":"p","subject":"chat.messages","time":"2026-01-01T00:00:00Z","sequence":` +
		strconv.FormatUint(seq, 10) + `,"data":{}}}`
}

// within fails the test when done is not closed in a while: what it
// guards would otherwise hang for ever (or for a timeout of minutes).
func within(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s hangs", what)
	}
}

// A handler that calls Close, or its own subscription's Unsubscribe, with
// its context while another goroutine's Close waits for that handler
// deadlocked: Close held the session's lock the handler's call waited
// for (Unsubscribe waited for the subscription's end, which waited for
// the handler). Called from a handler, both return without waiting for
// the handler, as they do when no Close is running.
func TestAHandlerClosingDuringCloseDoesNotDeadlock(t *testing.T) {
	for _, name := range []string{"Close", "Unsubscribe"} {
		t.Run(name, func(t *testing.T) {
			srv := newConnServer(t, func(_ int, f *ws.Frame) []string {
				switch f.Op {
				case ws.OpSubscribe:
					return []string{subscribedFrame(f, "s1"), deliverSeq("s1", "1", 1)}
				case ws.OpNegotiate:
					return nil
				}
				return []string{okFrame(f)}
			})
			ctx := context.Background()
			s := srv.dial(t)
			entered, proceed := make(chan struct{}), make(chan struct{})
			handlerErr := make(chan error, 1)
			var sub pigeon.Subscription
			sub, err := s.Subscribe(ctx, "chat.messages", func(hctx context.Context, d *pigeon.Delivery) error {
				close(entered)
				<-proceed
				if name == "Close" {
					handlerErr <- s.Close(hctx)
				} else {
					handlerErr <- sub.Unsubscribe(hctx)
				}
				return nil
			})
			require.NoError(t, err)
			<-entered
			closed := make(chan struct{})
			var closeErr error
			go func() {
				defer close(closed)
				closeErr = s.Close(ctx)
			}()
			// Once calls fail SESSION_CLOSED, the Close above runs.
			eventually(t, func() bool {
				_, err := s.Receive(ctx, "chat.messages", 1)
				return pigeon.ErrorCode(err) == pigeon.CodeSessionClosed
			}, "Close started")
			close(proceed)
			within(t, closed, "Close waiting for a handler that closes")
			require.NoError(t, closeErr)
			require.NoError(t, <-handlerErr)
			within(t, sub.Done(), "the subscription's end")
		})
	}
}

// A delivery numbered 2^64-1 (no broker numbers that far; a hostile or
// broken server) made the resume after Reconnect ask for sequence
// 2^64-1+1 = 0, which the broker refuses: the subscription ended. Such a
// sequence is no resume position: the subscription resumes as if it had
// not been numbered.
func TestASequenceAtTheTopOfUint64NeverResumesAtZero(t *testing.T) {
	for _, atMostOnce := range []bool{false, true} {
		t.Run("atMostOnce="+strconv.FormatBool(atMostOnce), func(t *testing.T) {
			srv := newConnServer(t, func(conn int, f *ws.Frame) []string {
				switch f.Op {
				case ws.OpSubscribe:
					if conn == 1 {
						return []string{subscribedFrame(f, "s1"), deliverSeq("s1", "top", math.MaxUint64)}
					}
					return []string{subscribedFrame(f, "s2")}
				case ws.OpNegotiate:
					return nil
				}
				return []string{okFrame(f)}
			})
			ctx := context.Background()
			s := srv.dial(t)
			got := make(chan string, 4)
			var opts []pigeon.SubscribeOption
			if atMostOnce {
				opts = append(opts, pigeon.WithAtMostOnce())
			}
			sub, err := s.Subscribe(ctx, "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
				got <- d.Message.ID
				return nil
			}, opts...)
			require.NoError(t, err)
			require.Equal(t, "msg_top", <-got)
			if !atMostOnce {
				eventually(t, func() bool { return len(srv.seen(ws.OpAck)) == 1 }, "the ack")
			}
			require.NoError(t, s.Reconnect(ctx))
			subs := srv.seen(ws.OpSubscribe)
			require.Len(t, subs, 2)
			require.Equal(t, 2, subs[1].conn)
			require.NotContains(t, string(subs[1].f.Start), `"sequence":0`)
			require.NoError(t, sub.Err())
			select {
			case <-sub.Done():
				t.Fatal("the subscription ended")
			default:
			}
		})
	}
}

// A delivery that names a subscription id on a connection that id is
// not of (the session's new connection, before its subscription is
// resumed there, naming the old connection's id) reached that
// subscription's handler. A subscription takes deliveries only from the
// connection it is subscribed on.
func TestADeliveryOnAnotherConnectionIsNotHandedOver(t *testing.T) {
	srv := newConnServer(t, func(conn int, f *ws.Frame) []string {
		switch f.Op {
		case ws.OpNegotiate:
			if conn == 2 {
				// Before any subscribe on this connection.
				return []string{deliverSeq("s1", "forged", 7)}
			}
			return nil
		case ws.OpSubscribe:
			if conn == 1 {
				return []string{subscribedFrame(f, "s1")}
			}
			return []string{subscribedFrame(f, "s2"), deliverSeq("s2", "real", 1)}
		}
		return []string{okFrame(f)}
	})
	ctx := context.Background()
	s := srv.dial(t)
	got := make(chan string, 4)
	_, err := s.Subscribe(ctx, "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
		got <- d.Message.ID
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, s.Reconnect(ctx))
	// One worker hands deliveries over in order: a forged one, queued
	// before the real one, would come first.
	require.Equal(t, "msg_real", <-got)
}

// A connection lost while Reconnect resumed the subscriptions on it (the
// server dropped it after the contract, or the caller's context ended)
// stopped every subscription for good, with SESSION_CLOSED as its Err,
// though nothing refused it: Reconnect returned nil on a dead connection.
// Reconnect now returns the error and keeps the subscriptions, which the
// next Reconnect resumes from where they were.
func TestAConnectionLostDuringResumeKeepsTheSubscriptions(t *testing.T) {
	srv := newConnServer(t, func(conn int, f *ws.Frame) []string {
		switch f.Op {
		case ws.OpNegotiate:
			return nil
		case ws.OpSubscribe:
			switch conn {
			case 1:
				return []string{subscribedFrame(f, "s1"), deliverSeq("s1", "1", 5)}
			case 2:
				return []string{dropConn}
			}
			return []string{subscribedFrame(f, "s3")}
		}
		return []string{okFrame(f)}
	})
	ctx := context.Background()
	s := srv.dial(t)
	got := make(chan string, 4)
	sub, err := s.Subscribe(ctx, "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
		got <- d.Message.ID
		return pigeon.RetryAfter(time.Hour, nil) // failed: resumed at its sequence
	})
	require.NoError(t, err)
	require.Equal(t, "msg_1", <-got)
	eventually(t, func() bool { return len(srv.seen(ws.OpNack)) == 1 }, "the nack")
	err = s.Reconnect(ctx)
	require.Error(t, err)
	select {
	case <-sub.Done():
		t.Fatalf("the subscription ended: %v", sub.Err())
	default:
	}
	require.NoError(t, s.Reconnect(ctx))
	subs := srv.seen(ws.OpSubscribe)
	require.Len(t, subs, 3)
	require.Equal(t, 3, subs[2].conn)
	require.JSONEq(t, `{"sequence":5}`, string(subs[2].f.Start), "resumed at the failed delivery")
	require.Equal(t, "s3", sub.ID())
}

// Close and Unsubscribe waited up to 30 s (the settle timeout) for each
// subscription's unsubscribe to be answered, whatever their context
// said: a server that never answers held Close(ctx) for 30 s times the
// subscriptions. The unsubscribe's answer is waited for only as long as
// the caller's context allows.
func TestCloseHonoursItsContextWhenUnsubscribesAreNotAnswered(t *testing.T) {
	srv := newConnServer(t, func(_ int, f *ws.Frame) []string {
		switch f.Op {
		case ws.OpNegotiate, ws.OpUnsubscribe:
			return nil // unsubscribes are never answered
		case ws.OpSubscribe:
			return []string{subscribedFrame(f, "s"+f.ID)}
		}
		return []string{okFrame(f)}
	})
	ctx := context.Background()
	s := srv.dial(t)
	for range 4 {
		_, err := s.Subscribe(ctx, "chat.messages", func(context.Context, *pigeon.Delivery) error { return nil })
		require.NoError(t, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = s.Close(cctx)
	}()
	within(t, closed, "Close with a context that ended")
	eventually(t, func() bool { return len(srv.seen(ws.OpUnsubscribe)) > 0 }, "the server is still told")
}

// A server that stops reading (or a connection dropped without a word)
// held the writer for ever: a caller writing its own frame (a Publish
// finding the writer idle) blocked in the write past its deadline, for
// good, and every call after it queued behind. A write that makes no
// progress for the write timeout now closes the connection, failing the
// calls SESSION_CLOSED.
func TestAServerThatStopsReadingDoesNotWedgeTheWriter(t *testing.T) {
	release := make(chan struct{})
	srv := newConnServer(t, func(_ int, f *ws.Frame) []string {
		if f.Op != ws.OpNegotiate {
			<-release // reads nothing more
		}
		return nil
	})
	t.Cleanup(func() { close(release) })
	ctx := context.Background()
	s := srv.dial(t, ws.WithWriteTimeout(200*time.Millisecond))
	data := []byte(`{"s":"` + strings.Repeat("x", 1<<20) + `"}`)
	stopped := make(chan struct{})
	var last error
	go func() {
		defer close(stopped)
		for {
			pctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			_, err := s.Publish(pctx, &pigeon.Message{ID: "msg_1", Type: "chat", Subject: "chat.messages", Data: data})
			cancel()
			if pigeon.ErrorCode(err) == pigeon.CodeSessionClosed {
				last = err
				return
			}
		}
	}()
	within(t, stopped, "a publish on a connection the server stopped reading")
	require.ErrorContains(t, last, "stopped reading")
	within(t, s.Done(), "the connection's end")
}
