package ws

import (
	"context"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/internal/jsontext"
	"pigeon/internal/predecoded"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

// checkoutEngine is an engine on the demo catalog with a memory store,
// contracts that outlive any test, and checkout's caller under a contract
// for payments.authorize.
func checkoutEngine(t testing.TB) (*pigeon.Engine, pigeon.Caller) {
	t.Helper()
	ctx := context.Background()
	opts := transporttest.Options()
	opts.Store, opts.ContractTTL = memory.New(nil), time.Hour
	e, err := pigeon.New(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	p, err := e.Authenticate(ctx, "checkout-token")
	require.NoError(t, err)
	k, err := e.Negotiate(ctx, p, "uk", []string{"payments.authorize"}, 0)
	require.NoError(t, err)
	return e, pigeon.Caller{Principal: p, Region: "uk", ContractID: k.ID()}
}

// preOf returns the data the server's decoder attached to m (nil: none),
// read out of the unexported field the engine takes it from.
func preOf(m *pigeon.Message) *predecoded.Data {
	return (*predecoded.Data)(reflect.ValueOf(m).Elem().FieldByName("pre").UnsafePointer())
}

// stripPre returns f's messages with their decoded data taken off, and
// the decoded data in the order found.
func stripPre(f *Frame) []*predecoded.Data {
	if f == nil {
		return nil
	}
	var out []*predecoded.Data
	take := func(m *pigeon.Message) {
		if m == nil {
			return
		}
		if p := preOf(m); p != nil {
			out = append(out, p)
			*m = *m.Clone() // Clone drops it
		}
	}
	take(f.Message)
	for _, m := range f.decoded {
		take(m)
	}
	for _, m := range f.Messages {
		take(m)
	}
	for _, d := range f.Deliveries {
		take(d.Message)
	}
	for _, r := range f.Results {
		take(r.Message)
	}
	return out
}

// requireServerFrameSound holds decodeServerFrame to decodeFrame on b: the
// same frame or error, and on every message it decoded data for, data
// that is exactly the message's Data, decoded as the engine decodes it.
func requireServerFrameSound(t *testing.T, b []byte) []*predecoded.Data {
	t.Helper()
	want, wantErr := decodeFrame(b, &interner{})
	got, gotErr := decodeServerFrame(b, &interner{})
	var msgs []*pigeon.Message
	if got != nil {
		msgs = append(msgs, got.Message)
		msgs = append(msgs, got.decoded...)
	}
	msgs = slices.DeleteFunc(msgs, func(m *pigeon.Message) bool { return m == nil })
	for _, m := range msgs {
		p := preOf(m)
		if p == nil {
			continue
		}
		require.Equal(t, len(m.Data), cap(m.Data), "%q: a handler growing Data must not reach what follows", b)
		require.Same(t, &p.Text[0], &m.Data[0], "%q: Data is the decoder's copy", b)
		v, err := jsontext.Decode(m.Data, pigeon.MaxJSONDepth)
		require.NoError(t, err, "%q", b)
		require.NotNil(t, p.Arena, "%q: decoded in the flat form", b)
		require.Equal(t, v, jsontext.Tree(p.Value), "%q", b)
	}
	published := len(slices.DeleteFunc(msgs, func(m *pigeon.Message) bool { return preOf(m) == nil }))
	pres := stripPre(got)
	require.Len(t, pres, published, "%q: only the messages a publish takes carry decoded data", b)
	requireSameFrame(t, want, got, "%q", b)
	require.Equal(t, pigeon.ErrorCode(wantErr), pigeon.ErrorCode(gotErr), "%q", b)
	return pres
}

func TestServerFramePredecodesData(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, tc := range []struct {
		name string
		in   string
		pre  int // messages given decoded data
	}{
		{"publish", `{"op":"publish","id":"1","message":{"type":"a","data":{"x":1,"y":["z",{"w":null}]}}}`, 1},
		{"publish no data", `{"op":"publish","id":"1","message":{"type":"a"}}`, 0},
		{"publish null data", `{"op":"publish","id":"1","message":{"type":"a","data":null}}`, 0},
		{"publish string data", `{"op":"publish","id":"1","message":{"type":"a","data":"s"}}`, 1},
		{"publish number data", `{"op":"publish","id":"1","message":{"type":"a","data":12.5e3}}`, 1},
		{"publish escaped data", `{"op":"publish","id":"1","message":{"type":"a","data":{"\u0061":"\u00e9\n"}}}`, 1},
		{"publish duplicate in data", `{"op":"publish","id":"1","message":{"type":"a","data":{"x":1,"x":2}}}`, 0},
		{"publish escaped duplicate", `{"op":"publish","id":"1","message":{"type":"a","data":{"x":1,"\u0078":2}}}`, 0},
		{"publish bad utf8", "{\"op\":\"publish\",\"id\":\"1\",\"message\":{\"type\":\"a\",\"data\":{\"x\":\"\xff\"}}}", 0},
		{"publish lone surrogate", `{"op":"publish","id":"1","message":{"type":"a","data":{"x":"\ud800"}}}`, 0},
		{"publish data at the engine's depth", `{"op":"publish","id":"1","message":{"type":"a","data":` + deep(pigeon.MaxJSONDepth) + `}}`, 1},
		{"publish data past the engine's depth", `{"op":"publish","id":"1","message":{"type":"a","data":` + deep(pigeon.MaxJSONDepth+1) + `}}`, 0},
		{"publish data past the frame's depth", `{"op":"publish","id":"1","message":{"type":"a","data":` + deep(checkDepth) + `}}`, 0},
		{"publish unterminated data", `{"op":"publish","id":"1","message":{"type":"a","data":{"x":1}`, 0},
		{"publish data then junk", `{"op":"publish","id":"1","message":{"type":"a","data":{"x":1}x}}`, 0},
		{"publish number then junk", `{"op":"publish","id":"1","message":{"type":"a","data":1x}}`, 0},
		{"publish bad frame member", `{"op":"publish","id":"1","message":{"type":"a","data":{"x":1}},"Op":"x"}`, 0},
		{"request", `{"op":"request","id":"1","timeoutMs":5,"message":{"type":"a","data":{"q":true}}}`, 1},
		{"batch", `{"op":"publish_batch","id":"1","messages":[{"type":"a","data":{"n":1}},{"type":"b","data":1e400},{"type":"c","data":[1,2]},5,{"Type":"d","data":{}}]}`, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Len(t, requireServerFrameSound(t, []byte(tc.in)), tc.pre)
		})
	}
}

// FuzzServerFrame holds decodeServerFrame to decodeFrame.
func FuzzServerFrame(f *testing.F) {
	for _, s := range []string{
		`{"op":"publish","id":"1","message":{"type":"a","data":{"x":1,"y":["z",{"w":null}]}}}`,
		`{"op":"publish_batch","id":"1","messages":[{"type":"a","data":{"n":1}},{"type":"b","data":{"n":1,"n":2}}]}`,
		`{"op":"request","id":"1","message":{"data":"\u00e9"}}`,
		`{"op":"publish","id":"1","message":{"data":1e400}}`,
		`{"op":"publish","id":"1","hops":3,"message":{"type":"a","hops":1,"data":{"n":1}}}`,
		`{"op":"publish_batch","id":"1","hops":1.0,"messages":[{"type":"a"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		requireServerFrameSound(t, b)
	})
}

// TestPredecodedDataJudged publishes decoded frames: the engine judges
// and stores what the frame carried, and refuses what it would refuse.
func TestPredecodedDataJudged(t *testing.T) {
	ctx := context.Background()
	e, caller := checkoutEngine(t)
	frame := func(m *pigeon.Message) []byte { return messageFrame(OpPublish, m, 0)(nil, "p1") }

	m := demo.Payment("o-1")
	f, err := decodeServerFrame(frame(m), &interner{})
	require.NoError(t, err)
	require.NotNil(t, preOf(f.Message))
	res, err := e.Publish(ctx, caller, f.Message)
	require.NoError(t, err)
	require.JSONEq(t, string(m.Data), string(res.Message.Data))
	require.Nil(t, preOf(f.Message), "the decoded data is used once")

	bad := demo.Payment("o-2")
	bad.Data = []byte(strings.Replace(string(bad.Data), `{`, `{"card":{"pan":"4111111111111111"},`, 1))
	f, err = decodeServerFrame(frame(bad), &interner{})
	require.NoError(t, err)
	require.NotNil(t, preOf(f.Message))
	_, err = e.Publish(ctx, caller, f.Message)
	require.Equal(t, pigeon.CodeSensitiveFieldDenied, pigeon.ErrorCode(err))
}

// TestPredecodedDataOnlyForItsText attaches decoded data that differs
// from the message's data on purpose, to see which the engine judges: the
// attached value while Data is the bytes it came with, once; the bytes
// otherwise.
func TestPredecodedDataOnlyForItsText(t *testing.T) {
	ctx := context.Background()
	e, caller := checkoutEngine(t)

	// attach gives m decoded data holding a card number its bytes lack.
	attach := func(m *pigeon.Message) {
		v, text, err := jsontext.DecodeText(m.Data, pigeon.MaxJSONDepth)
		require.NoError(t, err)
		v.(map[string]any)["card"] = map[string]any{"pan": "4111111111111111"}
		m.Data = text
		predecoded.Attach(m, &predecoded.Data{Value: v, Text: text})
	}
	refused := func(m *pigeon.Message) bool {
		_, err := e.Publish(ctx, caller, m)
		if err != nil {
			require.Equal(t, pigeon.CodeSensitiveFieldDenied, pigeon.ErrorCode(err))
		}
		return err != nil
	}

	m := demo.Payment("o-1")
	attach(m)
	require.True(t, refused(m), "Data is the attached bytes: the attached value is judged")
	require.False(t, refused(m), "used once: the second publish decodes the bytes")

	m = demo.Payment("o-2")
	attach(m)
	m.Data = append([]byte(nil), m.Data...)
	require.False(t, refused(m), "Data replaced, by equal bytes elsewhere: the bytes are judged")

	m = demo.Payment("o-3")
	attach(m)
	require.False(t, refused(m.Clone()), "a clone carries none")
	require.Nil(t, preOf(m.Clone()))
}

// BenchmarkServerPublishBatch decodes a publish_batch of 100 payments
// as the server's reader does and publishes it, with the data decoded by
// the frame decoder (predecoded) and by the engine after the frame
// decoder validated it (checked).
func BenchmarkServerPublishBatch(b *testing.B) {
	for _, tc := range []struct {
		name   string
		decode func([]byte, *interner) (*Frame, error)
	}{{"predecoded", decodeServerFrame}, {"checked", decodeFrame}} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			e, caller := checkoutEngine(b)
			var in interner
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				out := []byte(`{"op":"publish_batch","id":"b1","messages":[`)
				for k := range 100 {
					if k > 0 {
						out = append(out, ',')
					}
					m := demo.Payment("o")
					m.IdempotencyKey = "k-" + strconv.Itoa(i*100+k)
					out = m.AppendJSON(out)
				}
				out = append(out, "]}"...)
				f, err := tc.decode(out, &in)
				if err != nil {
					b.Fatal(err)
				}
				for _, p := range e.PublishBatch(ctx, caller, f.decoded) {
					if p.Err != nil {
						b.Fatal(p.Err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/msg")
		})
	}
}

// requireClientFrameSound holds decodeClientFrame to decodeFrame on b,
// text CheckJSON accepts: the same frame or error.
func requireClientFrameSound(t *testing.T, b []byte) {
	t.Helper()
	if pigeon.CheckJSON(b) != nil {
		return
	}
	want, wantErr := decodeFrame(b, &interner{})
	got, gotErr := decodeClientFrame(b, &interner{})
	requireSameFrame(t, want, got, "%q", b)
	require.Equal(t, pigeon.ErrorCode(wantErr), pigeon.ErrorCode(gotErr), "%q", b)
}

// FuzzClientFrame holds decodeClientFrame to decodeFrame on the text
// CheckJSON accepts.
func FuzzClientFrame(f *testing.F) {
	for _, s := range []string{
		`{"op":"deliver_batch","sub":"s","deliveries":[{"attempt":1,"message":{"id":"m","data":{"x":[1,{"y":"\"}"}]}}}]}`,
		`{"op":"deliver","sub":"s","attempt":2,"message":{"id":"m","data":"s\\\""}}`,
		`{"op":"messages","re":"1","messages":[{"id":"m","data":12.5},{"id":"n","data":null}]}`,
		`{"op":"decisions","re":"1","results":[{"status":"accepted","message":{"id":"m","data":{}}},{"error":{"code":"X","message":"y","details":{}}}]}`,
		`{"op":"reply","re":"1","message":{"data":[[[]]]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		requireClientFrameSound(t, b)
	})
}

// TestClientFrameTakesDataAsSent: the client's reader finds the end of a
// message's data without checking it, so data the server would never
// send (here: a duplicate member) reaches the handler as it came, where
// the strict reader refuses the frame. Everything around the data is
// checked as strictly as ever.
func TestClientFrameTakesDataAsSent(t *testing.T) {
	dup := []byte(`{"op":"deliver","sub":"s","attempt":1,"message":{"id":"m","data":{"x":1,"x":2}}}`)
	_, err := decodeFrame(dup, &interner{})
	require.Equal(t, pigeon.CodeDuplicateKey, pigeon.ErrorCode(err))
	f, err := decodeClientFrame(dup, &interner{})
	require.NoError(t, err)
	require.JSONEq(t, `{"x":2}`, string(f.Message.Data)) // encoding/json's reading
	require.Equal(t, `{"x":1,"x":2}`, string(f.Message.Data))

	outside := []byte(`{"op":"deliver","sub":"s","sub":"t","attempt":1,"message":{"id":"m","data":{}}}`)
	_, err = decodeClientFrame(outside, &interner{})
	require.Equal(t, pigeon.CodeDuplicateKey, pigeon.ErrorCode(err), "outside data, the frame is checked")
	envelope := []byte(`{"op":"deliver","sub":"s","attempt":1,"message":{"id":"m","id":"n","data":{}}}`)
	_, err = decodeClientFrame(envelope, &interner{})
	require.Equal(t, pigeon.CodeDuplicateKey, pigeon.ErrorCode(err), "outside data, the envelope is checked")
	bad := []byte("{\"op\":\"deliver\",\"sub\":\"s\",\"attempt\":1,\"message\":{\"id\":\"m\xff\",\"data\":{}}}")
	_, err = decodeClientFrame(bad, &interner{})
	require.Equal(t, pigeon.CodeInvalidUTF8, pigeon.ErrorCode(err))
}
