package ws

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

func TestHandBuiltFramesAreValidJSON(t *testing.T) {
	m := &pigeon.Message{SpecVersion: "1.0", ID: "msg_1", Type: "t", Subject: "s\"", Intent: "i", Data: json.RawMessage(`{"a":1}`), Sequence: 3}
	for _, b := range [][]byte{
		encodeDeliver(nil, "sub\"1", m, 2),
		encodeSimple(OpOK, "x\n"),
		encodeError("r", pigeon.NewError(pigeon.CodeBadRequest, "bad \"frame\"")),
		appendMessages(appendHead(nil, OpMessages, "m"), []*pigeon.Message{m, m}),
	} {
		if !json.Valid(b) {
			t.Fatalf("invalid frame %s", b)
		}
		if _, err := DecodeFrame(b); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	}
}

// FuzzDecodeFrameFast checks that the reflection-free decoder of the
// publish path decodes every frame it takes exactly as encoding/json does.
// Run it with
//
//	go test -run '^$' -fuzz FuzzDecodeFrameFast -fuzztime 60s ./transport/ws
func FuzzDecodeFrameFast(f *testing.F) {
	m := &pigeon.Message{SpecVersion: "1.0", ID: "msg_1", Type: "t", Subject: "s\"", Intent: "i", Data: json.RawMessage(`{"a":[1,"]"]}`), Sequence: 3,
		Signature: &pigeon.Signature{KID: "k", Alg: "ed25519", Sig: "x"}}
	for _, s := range []string{
		`{"op":"publish","id":"p","message":{"type":"chat","subject":"chat.messages","intent":"chat","data":{"text":"hi"}}}`,
		`{"op":"publish_batch","id":"b","messages":[{"type":"a"},5,null,"x",{"type":7},{"Type":"c"}]}`,
		`{"op":"publish_batch","id":"b","messages":{}}`,
		`{"op":"publish_batch","id":"b","Messages":[{}]}`,
		`{"op":"request","id":"q","timeoutMs":10,"message":{"sequence":-1}}`,
		`{"op":"decisions","re":"b","results":[{"status":"accepted","message":{"id":"m","sequence":1}},{"error":{"code":"SCHEMA_INVALID","message":"no","details":{"gate":"schema"}}}]}`,
		`{"op":"deliver","sub":"s","attempt":2,"message":{"id":"m\u0041","data":null}}`,
		`{"op":"messages","re":"r","messages":[{"id":"a"},{"id":"b","signature":null}]}`,
		`{"op":"ping","id":"1","attempt":1.5}`,
		`{"op":"deliver_batch","sub":"s","deliveries":[{"attempt":1,"message":{"id":"a"}},{"attempt":2,"message":{"id":"b","data":[1]}}]}`,
		`{"op":"deliver_batch","sub":"s","deliveries":[{"attempt":1.5,"message":{"id":"a"}},{"message":null}]}`,
		`{"op":"deliver_batch","sub":"s","deliveries":{}}`,
		string(encodeDeliver(nil, "sub\"1", m, 2)),
		string(appendMessages(appendHead(nil, OpMessages, "m"), []*pigeon.Message{m, m})),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '{' || pigeon.CheckJSON(b) != nil {
			return
		}
		fast, ok := decodeFrameFast(b, &interner{})
		if !ok {
			return
		}
		slow, err := decodeFrameJSON(b)
		require.NoError(t, err, "the fast path took a frame encoding/json refuses: %s", b)
		require.Equal(t, slow, fast, "%s", b)
		for _, raw := range fast.Batch {
			fm, ok := decodeMessageFast(raw, nil)
			if !ok {
				continue
			}
			var sm pigeon.Message
			require.NoError(t, json.Unmarshal(raw, &sm), "%s", raw)
			require.Equal(t, &sm, fm, "%s", raw)
		}
	})
}

// BenchmarkDecodeFrame compares the paths on the frames of the publish
// path: a publish of the demo payment, a batch of 100 of them (split, then
// each message decoded as the server does), the decision answer, the
// decisions answer of that batch, and a deliver_batch of 100. "frame" is
// decodeFrame (what a connection's reader runs), "fast" the walker alone
// on text already checked, "json" encoding/json.
func BenchmarkDecodeFrame(b *testing.B) {
	m := demo.Payment("o-1")
	m.IdempotencyKey = "k-1"
	publish := messageFrame(OpPublish, m, 0)(nil, "p1")
	accepted := m.Clone()
	accepted.ID, accepted.Sequence, accepted.ContractID, accepted.AcceptedAt = "msg_01J", 42, "ctr_1", "2026-12-01T00:00:00Z"
	decision := append(appendHead(nil, OpDecision, "p1"), `,"status":"accepted","message":`...)
	decision = append(accepted.AppendJSON(decision), '}')
	// list renders a frame of head and 100 elements of item, closed.
	list := func(head string, item func([]byte) []byte) []byte {
		out := []byte(head)
		for i := range 100 {
			if i > 0 {
				out = append(out, ',')
			}
			out = item(out)
		}
		return append(out, "]}"...)
	}
	batch := list(`{"op":"publish_batch","id":"b1","messages":[`, m.AppendJSON)
	decisions := list(`{"op":"decisions","re":"b1","results":[`, func(out []byte) []byte {
		return append(accepted.AppendJSON(append(out, `{"status":"accepted","message":`...)), '}')
	})
	deliverBatch := list(`{"op":"deliver_batch","sub":"s1","deliveries":[`, func(out []byte) []byte {
		return append(accepted.AppendJSON(append(out, `{"attempt":1,"message":`...)), '}')
	})
	var in interner
	for _, tc := range []struct {
		name string
		in   []byte
		msgs int
	}{{"publish", publish, 1}, {"batch100", batch, 100}, {"decision", decision, 1},
		{"decisions100", decisions, 100}, {"deliverBatch100", deliverBatch, 100}} {
		for _, path := range []struct {
			name   string
			decode func([]byte) (*Frame, bool)
			msg    func(json.RawMessage) bool
		}{
			{"frame", func(b []byte) (*Frame, bool) { f, err := decodeFrame(b, &in); return f, err == nil },
				func(r json.RawMessage) bool { _, err := batchMessage(r, &in); return err == nil }},
			{"fast", func(b []byte) (*Frame, bool) { return decodeFrameFast(b, &in) },
				func(r json.RawMessage) bool { _, ok := decodeMessageFast(r, &in); return ok }},
			{"json", func(b []byte) (*Frame, bool) { f, err := decodeFrameJSON(b); return f, err == nil },
				func(r json.RawMessage) bool { var m pigeon.Message; return json.Unmarshal(r, &m) == nil }},
		} {
			b.Run(tc.name+"/"+path.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(tc.in)))
				for b.Loop() {
					f, ok := path.decode(tc.in)
					if !ok {
						b.Fatal("not decoded")
					}
					for _, r := range f.Batch {
						if !path.msg(r) {
							b.Fatal("message not decoded")
						}
					}
				}
				b.ReportMetric(float64(b.N*tc.msgs)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}
