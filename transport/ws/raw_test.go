package ws_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// rawClient speaks the frame protocol by hand, as a client in any
// language would.
type rawClient struct {
	t      testing.TB
	c      *websocket.Conn
	n      int
	pushes []*ws.Frame
}

func (v *env) raw(t testing.TB, token string) *rawClient {
	t.Helper()
	return v.rawWith(t, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
}

func (v *env) rawWith(t testing.TB, opts *websocket.DialOptions) *rawClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, v.url, opts)
	require.NoError(t, err)
	c.SetReadLimit(64 << 20)
	t.Cleanup(func() { _ = c.CloseNow() })
	return &rawClient{t: t, c: c}
}

func (r *rawClient) write(s string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(r.t, r.c.Write(ctx, websocket.MessageText, []byte(s)))
}

// next reads one frame.
func (r *rawClient) next() *ws.Frame {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	typ, b, err := r.c.Read(ctx)
	require.NoError(r.t, err)
	require.Equal(r.t, websocket.MessageText, typ)
	f, err := ws.DecodeFrame(b)
	require.NoError(r.t, err, "server frame %s", b)
	return f
}

// call sends {"op":op,"id":N<body>} and returns the answer, keeping the
// pushes read meanwhile.
func (r *rawClient) call(op, body string) *ws.Frame {
	r.t.Helper()
	r.n++
	id := "c" + strconv.Itoa(r.n)
	r.write(`{"op":"` + op + `","id":"` + id + `"` + body + `}`)
	return r.answer(id)
}

func (r *rawClient) answer(id string) *ws.Frame {
	r.t.Helper()
	for {
		f := r.next()
		if f.Re == id {
			return f
		}
		require.Empty(r.t, f.Re, "answer to an unknown id: %+v", f)
		r.pushes = append(r.pushes, f)
	}
}

// push returns the next push frame (deliver, unsubscribed).
func (r *rawClient) push() *ws.Frame {
	r.t.Helper()
	if len(r.pushes) > 0 {
		f := r.pushes[0]
		r.pushes = r.pushes[1:]
		return f
	}
	f := r.next()
	require.Empty(r.t, f.Re, "expected a push, got %+v", f)
	return f
}

// ok sends a frame and requires its answer op.
func (r *rawClient) ok(op, body, answer string) *ws.Frame {
	r.t.Helper()
	f := r.call(op, body)
	require.Equal(r.t, answer, f.Op, "answer %+v (error %+v)", f, f.Error)
	return f
}

// fail sends a frame and requires an error frame with code.
func (r *rawClient) fail(op, body string, code pigeon.Code) *ws.Frame {
	r.t.Helper()
	f := r.call(op, body)
	require.Equal(r.t, ws.OpError, f.Op, "answer %+v", f)
	require.NotNil(r.t, f.Error)
	require.Equal(r.t, code, f.Error.Code, "error %+v", f.Error)
	return f
}

func (r *rawClient) negotiate(subjects ...string) pigeon.ContractInfo {
	r.t.Helper()
	b, _ := json.Marshal(subjects)
	f := r.ok(ws.OpNegotiate, `,"subjects":`+string(b), ws.OpContract)
	var info pigeon.ContractInfo
	require.NoError(r.t, json.Unmarshal(f.Contract, &info))
	return info
}

func msgJSON(t testing.TB, m *pigeon.Message) string {
	t.Helper()
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return string(b)
}

// decodeMsg requires a frame's message.
func decodeMsg(t testing.TB, m *pigeon.Message) *pigeon.Message {
	t.Helper()
	require.NotNil(t, m, "the frame has a message")
	return m
}

// closeStatus reads until the connection closes and returns its status.
func (r *rawClient) closeStatus() websocket.StatusCode {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		_, _, err := r.c.Read(ctx)
		if err != nil {
			require.NoError(r.t, ctx.Err(), "the connection did not close")
			return websocket.CloseStatus(err)
		}
	}
}
