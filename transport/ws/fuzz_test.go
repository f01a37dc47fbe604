package ws_test

import (
	"context"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"pigeon/transport/ws"
)

// fuzzProbeID is the id of the ping that follows every fuzzed frame.
const fuzzProbeID = "fuzz-probe-0b7e"

// FuzzFrames sends arbitrary bytes, as a text or a binary message, to a
// live connection of a running server: the server must not crash, must
// either answer the ping that follows or close the connection, and must
// let go of everything once the connection closes (connections, queued
// bytes, goroutines back to where they were); a fresh connection then
// still works. Run it with
//
//	go test -run '^$' -fuzz FuzzFrames -fuzztime 60s ./transport/ws
func FuzzFrames(f *testing.F) {
	for _, s := range []string{
		`{"op":"ping","id":"1"}`,
		`{"op":"negotiate","id":"n","subjects":["chat.messages","jobs.run","no.such"],"ttlMs":1000}`,
		`{"op":"negotiate","id":"n","subjects":["chat.messages"],"ttlMs":9223372036854775807}`,
		`{"op":"publish","id":"p","message":{"type":"chat","subject":"chat.messages","intent":"chat","data":{"text":"hi","n":[1,2,{"x":null}]}}}`,
		`{"op":"publish","id":"p","message":{"type":"chat","subject":"chat.messages","intent":"chat","data":{"text":"a","text":"b"}}}`,
		`{"op":"publish","id":"p","message":{"type":"chat","subject":"chat.messages","intent":"chat","data":{"text":"\ud800"}}}`,
		`{"op":"publish","id":"p","message":{"type":"chat","subject":"chat.messages","intent":"chat","data":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}}`,
		`{"op":"subscribe","id":"s","subject":"chat.messages","maxInFlight":10000,"start":"first"}`,
		`{"op":"subscribe","id":"s","subject":"chat.messages","selector":"/kind=chat","filter":"message.type == 'chat'","start":{"sequence":18446744073709551615}}`,
		`{"op":"subscribe","id":"s","subject":"jobs.run","group":"g","maxInFlight":-1}`,
		`{"op":"ack","id":"a","sub":"sub_1","messageId":"msg_x"}`,
		`{"op":"nack","id":"k","sub":"sub_1","messageId":"m","delayMs":9223372036854775807}`,
		`{"op":"nack","id":"k","subject":"jobs.run","messageId":"m","delayMs":-5}`,
		`{"op":"unsubscribe","id":"u","sub":"sub_1"}`,
		`{"op":"publish_batch","id":"b","messages":[{"type":"chat","subject":"chat.messages","intent":"chat","data":{}},null,{"type":5},"x",{"type":"chat","subject":"jobs.run","intent":"chat","data":{}}]}`,
		`{"op":"publish_batch","id":"b","messages":[]}`,
		`{"op":"publish","id":"p","hops":7,"message":{"type":"chat","subject":"chat.messages","intent":"chat","data":{},"hops":9}}`,
		`{"op":"publish_batch","id":"b","hops":4294967295,"messages":[{"type":"chat","subject":"chat.messages","intent":"chat","data":{}}]}`,
		`{"op":"publish","id":"p","hops":-1,"message":{"type":"chat","subject":"chat.messages","intent":"chat","data":{}}}`,
		`{"op":"publish_batch","id":"b","messages":{"type":"chat"}}`,
		`{"op":"request","id":"q","timeoutMs":9223372036854775807,"message":{"type":"t","subject":"chat.messages","intent":"chat","data":{}}}`,
		`{"op":"replay","id":"r","subject":"chat.messages","fromSequence":1,"toSequence":18446744073709551615,"max":-1}`,
		`{"op":"receive","id":"v","subject":"jobs.run","max":1000000}`,
		`{"op":"deliver","id":"d","sub":"s","attempt":2,"message":{}}`,
		`{"op":"ping","id":"` + strings.Repeat("i", 100<<10) + `"}`,
		`{"op":"ping","id":"a","id":"b"}`,
		`{"op":"ping","id":"` + "\xff" + `"}`,
		`{"op":"ping","id":"\udc00"}`,
		`[{"op":"ping","id":"1"}]`, `{`, ``, ` `, `null`,
	} {
		f.Add([]byte(s), false)
	}
	f.Add([]byte(`{"op":"ping","id":"1"}`), true)

	v := newEnv(f, &ws.Options{MaxFrame: 256 << 10, PublishRate: -1, PingInterval: -1}, manyContracts)
	// The engine starts one fan-out per subject on first use, and the test
	// framework runs a goroutine per input: they count in the baseline.
	base := runtime.NumGoroutine() + 16
	f.Fuzz(func(t *testing.T, b []byte, binary bool) { v.fuzzFrame(t, base, b, binary) })
}

// fuzzFrame is one input of FuzzFrames.
func (v *env) fuzzFrame(t testing.TB, base int, b []byte, binary bool) {
	c := v.fuzzDial(t)
	defer c.CloseNow()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c.Write(ctx, websocket.MessageText, []byte(`{"op":"negotiate","id":"neg","subjects":["chat.messages"]}`)) != nil {
		t.Fatal("write negotiate")
	}
	typ := websocket.MessageText
	if binary {
		typ = websocket.MessageBinary
	}
	if c.Write(ctx, typ, b) == nil {
		fuzzProbe(t, c)
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
	v.settled(t, base)
	fresh := v.fuzzDial(t)
	defer fresh.CloseNow()
	if !fuzzProbe(t, fresh) {
		t.Fatal("a fresh connection does not work")
	}
	_ = fresh.Close(websocket.StatusNormalClosure, "")
	v.settled(t, base)
}

func (v *env) fuzzDial(t testing.TB) *websocket.Conn {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, v.url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer alice-token"}}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.SetReadLimit(64 << 20)
	return c
}

// fuzzProbe pings and reports whether the pong came (false: the connection
// closed first).
func fuzzProbe(t testing.TB, c *websocket.Conn) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"op":"ping","id":"`+fuzzProbeID+`"}`)); err != nil {
		return false
	}
	for {
		_, b, err := c.Read(ctx)
		if ctx.Err() != nil {
			t.Fatal("the server neither answered nor closed the connection")
		}
		if err != nil {
			return false
		}
		if fr, err := ws.DecodeFrame(b); err == nil && fr.Op == ws.OpPong && fr.Re == fuzzProbeID {
			return true
		}
	}
}

// settled waits until the server holds no connection, no queued byte and
// no more goroutines than base, besides the op workers parked for the
// next op.
func (v *env) settled(t testing.TB, base int) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := v.srv.Stats()
		g := runtime.NumGoroutine() - ws.ParkedWorkers()
		if st.Open == 0 && st.QueuedBytes == 0 && g <= base {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Logf("%s", buf[:runtime.Stack(buf, true)])
			t.Fatalf("the server did not settle: %+v, %d goroutines (baseline %d)", st, g, base)
		}
		time.Sleep(time.Millisecond)
	}
}
