package ws_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/transport/ws"
)

// Text that readers could take differently is refused at the edge: an
// error frame with the code of pigeon.CheckJSON, nothing published, and the
// connection stays up.
func TestAmbiguousFramesAreRefused(t *testing.T) {
	v := newEnv(t, nil)
	ctx := context.Background()
	gateway := v.dial(t, "gateway-token", []string{"payments.authorize"})
	got := make(chan *pigeon.Message, 10)
	_, err := gateway.Subscribe(ctx, "payments.authorize", func(_ context.Context, d *pigeon.Delivery) error {
		got <- d.Message
		return nil
	})
	require.NoError(t, err)
	r := v.raw(t, "checkout-token")
	r.negotiate("payments.authorize")
	payment := msgJSON(t, demo.Payment("o-1"))
	const token = `"paymentToken":"tok_9f8e7d6c"`
	require.Contains(t, payment, token)

	tests := []struct {
		name, frame, re string
		code            pigeon.Code
	}{
		{"a raw PAN hidden behind a duplicate token",
			`{"op":"publish","id":"p1","message":` + strings.Replace(payment, token, `"paymentToken":"4111111111111111","paymentToken":"tok_abc"`, 1) + `}`,
			"p1", pigeon.CodeDuplicateKey},
		{"a duplicate amount",
			`{"op":"publish","id":"p2","message":` + strings.Replace(payment, `"amount":42.5`, `"amount":"x","amount":42.5`, 1) + `}`,
			"p2", pigeon.CodeDuplicateKey},
		{"a duplicate name written with an escape",
			`{"op":"publish","id":"p3","message":` + strings.Replace(payment, `"amount":42.5`, `"amount":1,"\u0061mount":42.5`, 1) + `}`,
			"p3", pigeon.CodeDuplicateKey},
		{"a lone surrogate escape",
			`{"op":"publish","id":"p4","message":` + strings.Replace(payment, `"orderId":"o-1"`, `"orderId":"o-\ud800"`, 1) + `}`,
			"p4", pigeon.CodeInvalidUTF8},
		{"a duplicate envelope member",
			`{"op":"publish","id":"p5","message":` + strings.Replace(payment, `"classification":"pci"`, `"classification":"public","classification":"pci"`, 1) + `}`,
			"p5", pigeon.CodeDuplicateKey},
		{"a lone surrogate in an envelope member",
			`{"op":"publish","id":"p6","message":` + strings.Replace(payment, `"idempotencyKey":"pay-o-1"`, `"idempotencyKey":"pay-\udbff"`, 1) + `}`,
			"p6", pigeon.CodeInvalidUTF8},
		{"a duplicate op", `{"op":"ping","op":"publish","id":"p7"}`, "p7", pigeon.CodeDuplicateKey},
		{"a duplicate id is not echoed", `{"op":"ping","id":"a","id":"b"}`, "", pigeon.CodeDuplicateKey},
		{"a lone surrogate in the id is not echoed", `{"op":"ping","id":"\udc00"}`, "", pigeon.CodeInvalidUTF8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r.write(tc.frame)
			_, b, err := r.c.Read(ctx)
			require.NoError(t, err)
			require.NotContains(t, string(b), "4111", "the answer never quotes a value")
			f, err := ws.DecodeFrame(b)
			require.NoError(t, err)
			require.Equal(t, ws.OpError, f.Op, "%s", b)
			require.Equal(t, tc.re, f.Re)
			require.Equal(t, tc.code, f.Error.Code, "%s", b)
			r.ok(ws.OpPing, "", ws.OpPong)
		})
	}
	_, last, err := v.st.Bounds(ctx, "payments.authorize")
	require.NoError(t, err)
	require.Zero(t, last, "nothing was stored")
	// The first delivery is the first valid message: nothing refused was
	// delivered.
	ok := r.ok(ws.OpPublish, `,"message":`+payment, ws.OpDecision)
	select {
	case m := <-got:
		require.Equal(t, decodeMsg(t, ok.Message).ID, m.ID)
		require.JSONEq(t, string(demo.Payment("o-1").Data), string(m.Data))
	case <-time.After(10 * time.Second):
		t.Fatal("the valid message was not delivered")
	}
}

// A text frame that is not UTF-8 breaks the WebSocket protocol: the server
// closes the connection with 1007.
func TestInvalidUTF8TextCloses1007(t *testing.T) {
	v := newEnv(t, nil)
	r := v.raw(t, "alice-token")
	r.negotiate("chat.messages")
	r.write("{\"op\":\"publish\",\"id\":\"x\",\"message\":{\"type\":\"chat\",\"subject\":\"chat.messages\",\"intent\":\"chat\",\"data\":{\"text\":\"\xff\"}}}")
	require.Equal(t, websocket.StatusInvalidFramePayloadData, r.closeStatus())
	eventually(t, func() bool { s := v.srv.Stats(); return s.InvalidText == 1 && s.Open == 0 }, "counted and closed: %+v", v.srv.Stats())
	_, last, err := v.st.Bounds(context.Background(), "chat.messages")
	require.NoError(t, err)
	require.Zero(t, last, "nothing was stored")
	// Another connection is unaffected.
	v.raw(t, "alice-token").ok(ws.OpPing, "", ws.OpPong)
}

// fakeServer answers the negotiate that Dial sends, and then every
// further frame with reply(id) (a scriptedServer of one answer a frame).
func fakeServer(t *testing.T, reply func(id string) []byte) string {
	t.Helper()
	return newScriptedServer(t, func(f *ws.Frame) []string { return []string{string(reply(f.ID))} }).url
}

// The Go client holds a server to the same rules: an answer it cannot take
// unambiguously fails the call with the reason, and text that is not UTF-8
// ends the connection with 1007.
func TestClientRefusesInvalidServerFrames(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		answer func(id string) []byte
		code   pigeon.Code
		closed bool
	}{
		{"duplicate member", func(id string) []byte { return []byte(`{"op":"pong","re":"` + id + `","op":"error"}`) }, pigeon.CodeDuplicateKey, false},
		{"lone surrogate", func(id string) []byte {
			return []byte(`{"op":"messages","re":"` + id + `","messages":[{"id":"\ud800"}]}`)
		}, pigeon.CodeInvalidUTF8, false},
		{"not UTF-8", func(id string) []byte {
			return []byte("{\"op\":\"messages\",\"re\":\"" + id + "\",\"messages\":[{\"id\":\"\xff\"}]}")
		}, pigeon.CodeSessionClosed, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ws.Dial(ctx, fakeServer(t, tc.answer), "token", []string{"chat.messages"})
			require.NoError(t, err)
			defer s.Close(ctx)
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err = s.Receive(cctx, "chat.messages", 1)
			require.Equal(t, tc.code, pigeon.ErrorCode(err), "%v", err)
			if tc.closed {
				select {
				case <-s.Done():
				case <-cctx.Done():
					t.Fatal("the connection stayed up")
				}
			}
		})
	}
}
