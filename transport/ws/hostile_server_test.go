package ws_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// scriptedServer upgrades connections, answers the negotiate that Dial
// sends, and writes, for every further frame, the frames script returns
// (in order, on the reader's goroutine: the answer to a later frame comes
// after them); one made by closePolicy closes the connection instead.
// seen counts the frames of each op it read.
type scriptedServer struct {
	url   string
	seen  map[string]*atomic.Int64
	ended atomic.Int64 // connections it has stopped reading
}

// closeMark starts what closePolicy returns.
const closeMark = "\x00close 1008: "

// closePolicy is what a scriptedServer's script returns to close the
// connection with 1008 and reason, as the server does when it refuses the
// connection's credential or contract.
func closePolicy(reason string) string { return closeMark + reason }

func newScriptedServer(t *testing.T, script func(f *ws.Frame) []string) *scriptedServer {
	t.Helper()
	ss := &scriptedServer{seen: map[string]*atomic.Int64{}}
	for _, op := range []string{ws.OpSubscribe, ws.OpUnsubscribe, ws.OpAck, ws.OpNack, ws.OpReceive} {
		ss.seen[op] = new(atomic.Int64)
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{ws.Subprotocol}})
		if err != nil {
			return
		}
		defer ss.ended.Add(1)
		defer c.CloseNow()
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
			if n := ss.seen[f.Op]; n != nil {
				n.Add(1)
			}
			out := script(f)
			if f.Op == ws.OpNegotiate {
				out = []string{`{"op":"contract","re":"` + f.ID + `","contract":{"id":"ctr_1","principal":"p","subjects":[]}}`}
			}
			for _, s := range out {
				if reason, ok := strings.CutPrefix(s, closeMark); ok {
					_ = c.Close(websocket.StatusPolicyViolation, reason)
					return
				}
				if c.Write(ctx, websocket.MessageText, []byte(s)) != nil {
					return
				}
			}
		}
	}))
	t.Cleanup(hs.Close)
	ss.url = "ws" + strings.TrimPrefix(hs.URL, "http")
	return ss
}

// deliverFrame is a deliver frame of msg_<n> at sequence n+1.
func deliverFrame(sub string, n int) string {
	return `{"op":"deliver","sub":"` + sub + `","attempt":1,"message":{"specversion":"1.0","id":"msg_` + strconv.Itoa(n) +
		`","type":"chat","source":"p","subject":"chat.messages","time":"2026-01-01T00:00:00Z","sequence":` + strconv.Itoa(n+1) + `,"data":{}}}`
}

// A server that ignores the window the client asked for cannot make the
// client queue deliveries without end: beyond the window, deliveries that
// no handler has begun are left unanswered (the server's ack wait gives
// them back), as a server that keeps the window never sees.
func TestClientQueuesNoMoreThanItsWindow(t *testing.T) {
	const flood = ws.DefaultWindow + 2000
	srv := newScriptedServer(t, func(f *ws.Frame) []string {
		switch f.Op {
		case ws.OpSubscribe:
			out := []string{`{"op":"subscribed","re":"` + f.ID + `","sub":"s1"}`}
			for i := range flood {
				out = append(out, deliverFrame("s1", i))
			}
			return out
		case ws.OpReceive:
			return []string{`{"op":"messages","re":"` + f.ID + `","messages":[]}`}
		}
		return []string{`{"op":"ok","re":"` + f.ID + `"}`}
	})
	ctx := context.Background()
	s, err := ws.Dial(ctx, srv.url, "token", []string{"chat.messages"})
	require.NoError(t, err)
	defer s.Close(ctx)
	release := make(chan struct{})
	defer close(release)
	sub, err := s.Subscribe(ctx, "chat.messages", func(ctx context.Context, d *pigeon.Delivery) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	require.NoError(t, err)
	// The answer to a later frame comes after every delivery: once it is
	// in, the client has read them all.
	_, err = s.Receive(ctx, "chat.messages", 1)
	require.NoError(t, err)
	require.LessOrEqual(t, ws.QueuedDeliveries(sub), ws.DefaultWindow)
}

// Deliveries naming subscriptions the client never opened each made it
// send an unsubscribe and wait for its answer, and remember the id for
// the connection's life: a server (or anything writing on the
// connection) could grow its memory and goroutines without end. The
// client ends at most a few such subscriptions at a time.
func TestClientBoundsTheSubscriptionsItNeverOpened(t *testing.T) {
	const flood = 5000
	srv := newScriptedServer(t, func(f *ws.Frame) []string {
		switch f.Op {
		case ws.OpReceive:
			out := make([]string, 0, flood+1)
			for i := range flood {
				out = append(out, deliverFrame("stranger_"+strconv.Itoa(i), i))
			}
			return append(out, `{"op":"messages","re":"`+f.ID+`","messages":[]}`)
		}
		return nil // unsubscribes are never answered
	})
	ctx := context.Background()
	s, err := ws.Dial(ctx, srv.url, "token", []string{"chat.messages"})
	require.NoError(t, err)
	defer s.Close(ctx)
	_, err = s.Receive(ctx, "chat.messages", 1)
	require.NoError(t, err)
	// Once the session is closed and the server has read all it was
	// sent, the count is final.
	require.NoError(t, s.Close(ctx))
	eventually(t, func() bool { return srv.ended.Load() == 1 }, "the server read to the end")
	require.LessOrEqual(t, srv.seen[ws.OpUnsubscribe].Load(), int64(ws.MaxOrphanEnds))
}

// An answer to an id the client never sent, or to one it gave up on, is
// dropped: the calls waiting meanwhile get their own answers.
func TestClientIgnoresAnswersToIDsItNeverSent(t *testing.T) {
	srv := newScriptedServer(t, func(f *ws.Frame) []string {
		return []string{
			`{"op":"messages","re":"zz-never","messages":[{"id":"msg_forged","subject":"chat.messages","data":{}}]}`,
			`{"op":"error","re":"zz-never2","error":{"code":"INTERNAL","message":"x","details":{}}}`,
			`{"op":"messages","re":"` + f.ID + `","messages":[]}`,
		}
	})
	ctx := context.Background()
	s, err := ws.Dial(ctx, srv.url, "token", []string{"chat.messages"})
	require.NoError(t, err)
	defer s.Close(ctx)
	msgs, err := s.Receive(ctx, "chat.messages", 1)
	require.NoError(t, err)
	require.Empty(t, msgs)
}

// A subscribe is running only when the server answers it subscribed,
// naming a subscription id no other subscription of the connection holds:
// an answer of another kind, without an id or with a live one's, fails the
// call, and the subscriptions already running keep their deliveries.
func TestClientRefusesASubscribeAnsweredAmiss(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(id string) string
	}{
		{"another op", func(id string) string { return `{"op":"ok","re":"` + id + `"}` }},
		{"no sub", func(id string) string { return `{"op":"subscribed","re":"` + id + `"}` }},
		// A live subscription's id given again would route its deliveries
		// to the second (and end it with the second).
		{"the first's sub", func(id string) string { return `{"op":"subscribed","re":"` + id + `","sub":"s1"}` }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int64
			srv := newScriptedServer(t, func(f *ws.Frame) []string {
				if f.Op != ws.OpSubscribe {
					return []string{`{"op":"ok","re":"` + f.ID + `"}`}
				}
				if n.Add(1) == 1 {
					return []string{`{"op":"subscribed","re":"` + f.ID + `","sub":"s1"}`}
				}
				return []string{tc.answer(f.ID), deliverFrame("s1", 1)}
			})
			ctx := context.Background()
			s, err := ws.Dial(ctx, srv.url, "token", []string{"chat.messages"})
			require.NoError(t, err)
			defer s.Close(ctx)
			first := make(chan string, 8)
			_, err = s.Subscribe(ctx, "chat.messages", func(ctx context.Context, d *pigeon.Delivery) error {
				first <- d.Message.ID
				return nil
			})
			require.NoError(t, err)
			second := make(chan string, 8)
			_, err = s.Subscribe(ctx, "chat.messages", func(ctx context.Context, d *pigeon.Delivery) error {
				second <- d.Message.ID
				return nil
			})
			require.Error(t, err)
			select {
			case <-first:
			case <-time.After(10 * time.Second):
				t.Fatal("the first subscription lost its delivery")
			}
			require.Empty(t, second)
			require.Zero(t, srv.seen[ws.OpUnsubscribe].Load(), "the first's subscription is not ended")
		})
	}
}
