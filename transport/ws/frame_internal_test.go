package ws

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
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

// nested renders n arrays, one in the other.
func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// strictCase is a frame and what the strict path does with it: takes it
// (strict) or gives up, and the code decodeFrame then answers ("" for
// none).
type strictCase struct {
	name, in string
	strict   bool
	code     pigeon.Code
}

// strictCases are the frames the strict path must give up on, one or more
// per kind of text CheckJSON or encoding/json reads otherwise than a plain
// walk would, at each level the walker walks, with the near misses it
// takes.
var strictCases = []strictCase{
	{"plain publish", `{"op":"publish","id":"p","message":{"type":"t","data":{"a":[1,"x"]}}}`, true, ""},
	{"white space", " {\t\"op\" :\r\n\"ping\" , \"id\":\"1\" } ", true, ""},
	{"no-break space before", "\u00a0{\"op\":\"ping\",\"id\":\"1\"}", false, pigeon.CodeBadRequest},
	{"vertical tab after", "{\"op\":\"ping\",\"id\":\"1\"}\v", false, pigeon.CodeBadRequest},
	{"ideographic space after", "{\"op\":\"ping\",\"id\":\"1\"}\u3000", false, pigeon.CodeBadRequest},
	{"utf8 strings", `{"op":"publish","id":"é€😀","message":{"subject":"日本","data":"ü"}}`, true, ""},
	{"no op", `{"id":"1"}`, true, pigeon.CodeBadRequest},
	{"minus zero attempt", `{"op":"deliver","sub":"s","attempt":-0,"message":{"id":"a"}}`, true, ""},
	{"brief publish", `{"op":"publish","id":"p","brief":true,"message":{"type":"t","data":{}}}`, true, ""},
	{"brief false", `{"op":"publish_batch","id":"p","brief":false,"messages":[{"type":"t"}]}`, true, ""},
	{"brief spaced", `{"op":"publish","id":"p","brief" : true ,"message":{}}`, true, ""},
	{"brief null", `{"op":"publish","id":"p","brief":null,"message":{}}`, false, ""},
	{"brief not a bool", `{"op":"publish","id":"p","brief":"yes","message":{}}`, false, pigeon.CodeBadRequest},
	{"brief truthy word", `{"op":"publish","id":"p","brief":truex}`, false, pigeon.CodeBadRequest},
	{"brief cut short", `{"op":"publish","id":"p","brief":tru}`, false, pigeon.CodeBadRequest},
	{"duplicate brief", `{"op":"publish","id":"p","brief":true,"brief":false}`, false, pigeon.CodeDuplicateKey},
	{"ack of ids", `{"op":"ack","id":"7","sub":"s1","messageIds":["msg_a","msg_b"]}`, true, ""},
	{"ack of no ids", `{"op":"ack","id":"7","sub":"s1","messageIds":[]}`, true, ""},
	{"ack of one id", `{"op":"ack","id":"7","sub":"s1","messageId":"msg_a"}`, true, ""},
	{"ack ids null", `{"op":"ack","id":"7","sub":"s1","messageIds":null}`, false, ""},
	{"ack id not a string", `{"op":"ack","id":"7","sub":"s1","messageIds":["a",5]}`, false, pigeon.CodeBadRequest},
	{"ack id escaped", `{"op":"ack","id":"7","sub":"s1","messageIds":["\u0061"]}`, false, ""},
	{"duplicate ack ids", `{"op":"ack","id":"7","messageIds":["a"],"messageIds":["b"]}`, false, pigeon.CodeDuplicateKey},

	{"duplicate in frame", `{"op":"publish","id":"a","id":"b"}`, false, pigeon.CodeDuplicateKey},
	{"duplicate op", `{"op":"publish","op":"ping"}`, false, pigeon.CodeDuplicateKey},
	{"duplicate in envelope", `{"op":"publish","id":"p","message":{"id":"a","type":"t","id":"b"}}`, false, pigeon.CodeDuplicateKey},
	{"duplicate in signature", `{"op":"deliver","sub":"s","attempt":1,"message":{"id":"a","signature":{"kid":"k","kid":"j"}}}`, false, pigeon.CodeDuplicateKey},
	{"duplicate in delivery", `{"op":"deliver_batch","sub":"s","deliveries":[{"attempt":1,"message":{"id":"a"},"attempt":2}]}`, false, pigeon.CodeDuplicateKey},
	{"duplicate in result", `{"op":"decisions","re":"b","results":[{"status":"accepted","status":"x"}]}`, false, pigeon.CodeDuplicateKey},
	{"duplicate in data", `{"op":"publish","id":"p","message":{"data":{"a":1,"b":{"c":1,"c":2}}}}`, false, pigeon.CodeDuplicateKey},
	{"duplicate in error", `{"op":"decisions","re":"b","results":[{"error":{"code":"X","message":"m","code":"Y","details":{}}}]}`, false, pigeon.CodeDuplicateKey},
	{"duplicate in batch message", `{"op":"publish_batch","id":"b","messages":[{"type":"a"},{"type":"a","type":"b"}]}`, false, pigeon.CodeDuplicateKey},
	{"duplicate escaped", `{"op":"publish","id":"a","\u0069d":"b"}`, false, pigeon.CodeDuplicateKey},

	{"escape nul", `{"op":"publish","id":"a\u0000"}`, false, ""},
	{"escape newline", `{"op":"ping","id":"a\nb"}`, false, ""},
	{"escape in envelope", `{"op":"publish","id":"p","message":{"type":"\u0074"}}`, false, ""},
	{"escaped name", `{"op":"publish","\u0069d":"p"}`, false, ""},
	{"lone surrogate", `{"op":"publish","id":"\ud800"}`, false, pigeon.CodeInvalidUTF8},
	{"lone surrogate in envelope", `{"op":"publish","id":"p","message":{"id":"\udc00x"}}`, false, pigeon.CodeInvalidUTF8},
	{"lone surrogate in data", `{"op":"publish","id":"p","message":{"data":["\ud83d"]}}`, false, pigeon.CodeInvalidUTF8},
	{"control character", "{\"op\":\"ping\",\"id\":\"a\x01\"}", false, pigeon.CodeBadRequest},
	{"control character in envelope", "{\"op\":\"publish\",\"id\":\"p\",\"message\":{\"type\":\"\x1f\"}}", false, pigeon.CodeBadRequest},
	{"invalid utf8", "{\"op\":\"ping\",\"id\":\"\xff\"}", false, pigeon.CodeInvalidUTF8},
	{"utf8 surrogate", "{\"op\":\"ping\",\"id\":\"\xed\xa0\x80\"}", false, pigeon.CodeInvalidUTF8},
	{"truncated utf8", "{\"op\":\"publish\",\"id\":\"p\",\"message\":{\"subject\":\"\xe6\x97\"}}", false, pigeon.CodeInvalidUTF8},
	{"invalid utf8 in data", "{\"op\":\"publish\",\"id\":\"p\",\"message\":{\"data\":{\"k\":\"\xc0\xaf\"}}}", false, pigeon.CodeInvalidUTF8},
	{"invalid utf8 in batch", "{\"op\":\"publish_batch\",\"id\":\"b\",\"messages\":[\"\xff\"]}", false, pigeon.CodeInvalidUTF8},

	{"plus", `{"op":"request","id":"q","timeoutMs":+1}`, false, pigeon.CodeBadRequest},
	{"leading zero", `{"op":"request","id":"q","timeoutMs":01}`, false, pigeon.CodeBadRequest},
	{"leading zeros attempt", `{"op":"deliver","sub":"s","attempt":007,"message":{}}`, false, pigeon.CodeBadRequest},
	{"leading zero sequence", `{"op":"publish","id":"p","message":{"sequence":01}}`, false, pigeon.CodeBadRequest},
	{"minus zero sequence", `{"op":"publish","id":"p","message":{"sequence":-0}}`, false, pigeon.CodeEnvelopeInvalid},
	{"exponent", `{"op":"deliver","sub":"s","attempt":1e2,"message":{}}`, false, pigeon.CodeBadRequest},
	{"fraction", `{"op":"publish","id":"p","message":{"sequence":1.0}}`, false, pigeon.CodeEnvelopeInvalid},
	{"hops", `{"op":"deliver","sub":"s","attempt":1,"message":{"id":"a","acceptedAt":"t","hops":4294967295}}`, true, ""},
	{"hops null", `{"op":"publish","id":"p","message":{"hops":null}}`, false, ""},
	{"hops negative", `{"op":"publish","id":"p","message":{"hops":-1}}`, false, pigeon.CodeEnvelopeInvalid},
	{"hops overflow", `{"op":"publish","id":"p","message":{"hops":4294967296}}`, false, pigeon.CodeEnvelopeInvalid},
	{"hops fraction", `{"op":"publish","id":"p","message":{"hops":1.0}}`, false, pigeon.CodeEnvelopeInvalid},
	{"hops string", `{"op":"publish","id":"p","message":{"hops":"1"}}`, false, pigeon.CodeEnvelopeInvalid},
	{"bare minus", `{"op":"request","id":"q","timeoutMs":-}`, false, pigeon.CodeBadRequest},
	{"attempt overflow", `{"op":"deliver","sub":"s","attempt":99999999999999999999,"message":{}}`, false, pigeon.CodeBadRequest},

	{"deep data", `{"op":"publish","id":"p","message":{"data":` + nested(checkDepth-2) + `}}`, true, ""},
	{"too deep data", `{"op":"publish","id":"p","message":{"data":` + nested(checkDepth-1) + `}}`, false, pigeon.CodeBadRequest},
	{"deep delivery", `{"op":"deliver_batch","sub":"s","deliveries":[{"message":{"data":` + nested(checkDepth-4) + `}}]}`, true, ""},
	{"too deep delivery", `{"op":"deliver_batch","sub":"s","deliveries":[{"message":{"data":` + nested(checkDepth-3) + `}}]}`, false, pigeon.CodeBadRequest},
	{"deep messages", `{"op":"messages","re":"r","messages":[{"data":` + nested(checkDepth-3) + `}]}`, true, ""},
	{"too deep messages", `{"op":"messages","re":"r","messages":[{"data":` + nested(checkDepth-2) + `}]}`, false, pigeon.CodeBadRequest},
	{"deep error", `{"op":"decisions","re":"b","results":[{"error":{"code":"X","message":"m","details":{"d":` + nested(checkDepth-5) + `}}}]}`, true, ""},
	{"too deep error", `{"op":"decisions","re":"b","results":[{"error":{"code":"X","message":"m","details":{"d":` + nested(checkDepth-4) + `}}}]}`, false, pigeon.CodeBadRequest},
	{"deep batch", `{"op":"publish_batch","id":"b","messages":[` + nested(checkDepth-2) + `]}`, true, ""},
	{"too deep batch", `{"op":"publish_batch","id":"b","messages":[` + nested(checkDepth-1) + `]}`, false, pigeon.CodeBadRequest},

	{"trailing garbage", `{"op":"ping","id":"1"}x`, false, pigeon.CodeBadRequest},
	{"second object", `{"op":"ping","id":"1"}{}`, false, pigeon.CodeBadRequest},
	{"trailing comma", `{"op":"ping","id":"1",}`, false, pigeon.CodeBadRequest},
	{"missing comma", `{"op":"ping" "id":"1"}`, false, pigeon.CodeBadRequest},
	{"missing colon", `{"op" "ping"}`, false, pigeon.CodeBadRequest},
	{"trailing comma in batch", `{"op":"publish_batch","id":"b","messages":[{},]}`, false, pigeon.CodeBadRequest},
	{"leading comma in batch", `{"op":"publish_batch","id":"b","messages":[,{}]}`, false, pigeon.CodeBadRequest},
	{"missing comma in messages", `{"op":"messages","re":"r","messages":[{"id":"a"} {"id":"b"}]}`, false, pigeon.CodeBadRequest},
	{"trailing comma in envelope", `{"op":"publish","id":"p","message":{"id":"a",}}`, false, pigeon.CodeBadRequest},
	{"bad data", `{"op":"publish","id":"p","message":{"data":{"a":}}}`, false, pigeon.CodeBadRequest},
	{"truncated", `{"op":"ping","id":"1`, false, pigeon.CodeBadRequest},
	{"truncated name", `{"op`, false, pigeon.CodeBadRequest},
	{"open quote", `{"`, false, pigeon.CodeBadRequest},
	{"unclosed", `{"op":"ping"`, false, pigeon.CodeBadRequest},

	{"null data", `{"op":"publish","id":"p","message":{"data":null}}`, false, ""},
	{"null message", `{"op":"publish","id":"p","message":null}`, false, ""},
	{"other case", `{"op":"publish","ID":"p"}`, false, pigeon.CodeBadRequest},
	{"op in other case", `{"OP":"ping","id":"1"}`, false, pigeon.CodeBadRequest},
	{"envelope member in other case", `{"op":"publish","id":"p","message":{"type":"t","Data":{"a":1}}}`, false, pigeon.CodeEnvelopeInvalid},
	{"signature member in other case", `{"op":"publish","id":"p","message":{"signature":{"KID":"k"}}}`, false, pigeon.CodeEnvelopeInvalid},
	{"signature of the second form", `{"op":"publish","id":"p","message":{"signature":{"kid":"k","alg":"ed25519","sig":"s","v":2}}}`, true, ""},
	{"signature v of another form", `{"op":"deliver","sub":"s","attempt":1,"message":{"id":"a","signature":{"kid":"k","v":7}}}`, true, ""},
	{"signature v null", `{"op":"publish","id":"p","message":{"signature":{"kid":"k","v":null}}}`, false, ""},
	{"signature v string", `{"op":"publish","id":"p","message":{"signature":{"v":"2"}}}`, false, pigeon.CodeEnvelopeInvalid},
	{"signature v fraction", `{"op":"publish","id":"p","message":{"signature":{"v":2.5}}}`, false, pigeon.CodeEnvelopeInvalid},
	{"signature v twice", `{"op":"publish","id":"p","message":{"signature":{"v":2,"v":2}}}`, false, pigeon.CodeDuplicateKey},
	{"signature v in other case", `{"op":"publish","id":"p","message":{"signature":{"V":2}}}`, false, pigeon.CodeEnvelopeInvalid},
	{"other case inside data", `{"op":"publish","id":"p","message":{"data":{"Data":1,"ID":2}}}`, true, ""},
	{"batch message in other case", `{"op":"publish_batch","id":"b","messages":[{"type":"a"},{"Type":"c"}]}`, true, ""},
	{"unknown member", `{"op":"subscribe","id":"s","subject":"a"}`, false, ""},
}

// decodeFrameTwoPass is decodeFrame as it was before the strict path:
// every frame checked by CheckJSON before it is decoded.
func decodeFrameTwoPass(b []byte) (*Frame, error) {
	b = bytes.Trim(b, " \t\r\n")
	if len(b) == 0 || b[0] != '{' {
		return decodeFrame(b, nil) // the same refusal
	}
	return decodeFrameChecked(b, nil)
}

// requireStrictSound checks the strict path on b: a frame it takes is one
// CheckJSON accepts and encoding/json decodes to an equal frame, and
// decodeFrame answers b (frame, or error code and text) as the two-pass
// decoder does.
func requireStrictSound(t *testing.T, b []byte) {
	t.Helper()
	if strict, ok := decodeFrameStrict(b, &interner{}); ok {
		require.NoError(t, pigeon.CheckJSON(b), "the strict path took a frame CheckJSON refuses: %q", b)
		slow, err := decodeFrameJSON(b)
		require.NoError(t, err, "the strict path took a frame encoding/json refuses: %q", b)
		requireSameFrame(t, slow, strict, "%q", b)
	}
	got, gotErr := decodeFrame(b, &interner{})
	want, wantErr := decodeFrameTwoPass(b)
	requireSameFrame(t, want, got, "%q", b)
	require.Equal(t, pigeon.ErrorCode(wantErr), pigeon.ErrorCode(gotErr), "%q", b)
	if wantErr != nil {
		require.EqualError(t, gotErr, wantErr.Error(), "%q", b)
	}
}

// requireSameFrame holds two decodings of a frame equal, a publish_batch's
// messages compared as publishBatch judges them (the message, decoded by
// the frame decoder or from its text, or the refusal), whichever decoder
// left which text undecoded.
func requireSameFrame(t *testing.T, want, got *Frame, msgAndArgs ...any) {
	t.Helper()
	w, wb := judgedBatch(want)
	g, gb := judgedBatch(got)
	require.Equal(t, w, g, msgAndArgs...)
	require.Equal(t, wb, gb, msgAndArgs...)
}

// judgedBatch returns f without its batch, and the batch as publishBatch
// judges it: per message, the message or its refusal's code and text.
func judgedBatch(f *Frame) (*Frame, []any) {
	if f == nil {
		return nil, nil
	}
	var out []any
	for i := range f.Batch {
		if m := f.decoded[i]; m != nil {
			out = append(out, m)
			continue
		}
		m, err := batchMessage(f.Batch[i], nil)
		if err != nil {
			out = append(out, string(pigeon.ErrorCode(err))+": "+err.Error())
			continue
		}
		out = append(out, m)
	}
	g := *f
	g.Batch, g.decoded, g.delivered = nil, nil, nil
	if g.Results != nil {
		g.Results = slices.Clone(g.Results)
		for i := range g.Results {
			g.Results[i].result = nil
		}
	}
	return &g, out
}

// TestBatchMessageInOtherCase checks that a message of a publish_batch
// with a member spelled in another case than its field is refused alone,
// ENVELOPE_INVALID, and the others are taken.
func TestBatchMessageInOtherCase(t *testing.T) {
	f, err := decodeFrame([]byte(`{"op":"publish_batch","id":"b","messages":[{"type":"a"},{"Type":"c"},{"type":"d","Data":{}}]}`), nil)
	require.NoError(t, err)
	_, judged := judgedBatch(f)
	require.Len(t, judged, 3)
	require.Equal(t, "a", judged[0].(*pigeon.Message).Type)
	for _, j := range judged[1:] {
		require.IsType(t, "", j)
		require.Contains(t, j, string(pigeon.CodeEnvelopeInvalid)+": ")
		require.Contains(t, j, "only in case")
	}
}

func TestDecodeFrameStrict(t *testing.T) {
	for _, tc := range strictCases {
		t.Run(tc.name, func(t *testing.T) {
			b := []byte(tc.in)
			_, ok := decodeFrameStrict(b, nil)
			require.Equal(t, tc.strict, ok, "strict path took it")
			_, err := decodeFrame(b, nil)
			require.Equal(t, tc.code, pigeon.ErrorCode(err), "%v", err)
			requireStrictSound(t, b)
		})
	}
}

// TestCheckDepth holds checkDepth to the nesting pigeon.CheckJSON allows.
func TestCheckDepth(t *testing.T) {
	require.NoError(t, pigeon.CheckJSON([]byte(nested(checkDepth))))
	require.Error(t, pigeon.CheckJSON([]byte(nested(checkDepth+1))))
}

// FuzzDecodeFrameFast is a differential test of the walker: a frame the
// strict path takes is one CheckJSON accepts and encoding/json decodes to
// an equal frame, decodeFrame answers every input as the two-pass decoder
// does, and on text CheckJSON accepted the fast path decodes every frame
// it takes, and every message of a batch, exactly as encoding/json does.
// Run it with
//
//	go test -run '^$' -fuzz FuzzDecodeFrameFast -fuzztime 60s ./transport/ws
func FuzzDecodeFrameFast(f *testing.F) {
	m := &pigeon.Message{SpecVersion: "1.0", ID: "msg_1", Type: "t", Subject: "s\"", Intent: "i", Data: json.RawMessage(`{"a":[1,"]"]}`), Sequence: 3,
		Signature: &pigeon.Signature{KID: "k", Alg: "ed25519", Sig: "x"}, Hops: 2}
	plain := m.Clone()
	plain.Subject = "s"
	for _, s := range []string{
		`{"op":"publish","id":"p","message":{"type":"chat","subject":"chat.messages","intent":"chat","data":{"text":"hi"}}}`,
		`{"op":"publish_batch","id":"b","messages":[{"type":"a"},5,null,"x",{"type":7},{"Type":"c"}]}`,
		`{"op":"publish_batch","id":"b","messages":{}}`,
		`{"op":"publish","id":"p","brief":true,"message":{"type":"t"}}`,
		`{"op":"publish","id":"p","hops":3,"message":{"type":"t","hops":9}}`,
		`{"op":"publish_batch","id":"b","hops":4294967295,"messages":[{"type":"a"}]}`,
		`{"op":"publish","id":"p","hops":4294967296,"message":{"type":"t"}}`,
		`{"op":"publish","id":"p","hops":-1,"message":{"type":"t"}}`,
		`{"op":"publish","id":"p","hops":1.5,"message":{"type":"t"}}`,
		`{"op":"publish","id":"p","hops":1e1,"message":{"type":"t"}}`,
		`{"op":"publish","id":"p","hops":null,"hOps":2,"message":{"type":"t"}}`,
		`{"op":"publish","id":"p","hops":"3","message":{"type":"t"}}`,
		`{"op":"publish_batch","id":"b","brief":false,"messages":[{"type":"a"}]}`,
		`{"op":"publish_batch","id":"b","Messages":[{}]}`,
		`{"op":"request","id":"q","timeoutMs":10,"message":{"sequence":-1}}`,
		`{"op":"decisions","re":"b","results":[{"status":"accepted","message":{"id":"m","sequence":1}},{"error":{"code":"SCHEMA_INVALID","message":"no","details":{"gate":"schema"}}}]}`,
		`{"op":"deliver","sub":"s","attempt":2,"message":{"id":"m\u0041","data":null}}`,
		`{"results":[{"error":{"detAils":{}}}]}`,
		`{"op":"messages","re":"r","messages":[{"id":"a"},{"id":"b","signature":null}]}`,
		`{"op":"ping","id":"1","attempt":1.5}`,
		`{"op":"deliver_batch","sub":"s","deliveries":[{"attempt":1,"message":{"id":"a"}},{"attempt":2,"message":{"id":"b","data":[1]}}]}`,
		`{"op":"deliver_batch","sub":"s","deliveries":[{"attempt":1.5,"message":{"id":"a"}},{"message":null}]}`,
		`{"op":"deliver_batch","sub":"s","deliveries":{}}`,
		`{"op":"ack","id":"a","sub":"s","messageId":"m","sequence":18446744073709551615}`,
		`{"op":"ack","id":"a","sub":"s","messageIds":["m","n"],"sequences":[1,0]}`,
		`{"op":"nack","id":"a","sub":"s","messageId":"m","sequence":-1}`,
		`{"op":"ack","id":"a","sub":"s","messageIds":[],"sequences":[1e3,1.0,18446744073709551616,null]}`,
		string(encodeDeliver(nil, "sub\"1", m, 2)),
		string(encodeDeliver(nil, "sub1", plain, 2)),
		string(appendMessages(appendHead(nil, OpMessages, "m"), []*pigeon.Message{m, m})),
		string(appendMessages(appendHead(nil, OpMessages, "m"), []*pigeon.Message{plain, plain})),
	} {
		f.Add([]byte(s))
	}
	for _, tc := range strictCases {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		requireStrictSound(t, b)
		if len(b) == 0 || b[0] != '{' || pigeon.CheckJSON(b) != nil {
			return
		}
		fast, ok := decodeFrameFast(b, &interner{})
		if !ok {
			return
		}
		slow, err := decodeFrameJSON(b)
		require.NoError(t, err, "the fast path took a frame encoding/json refuses: %s", b)
		requireSameFrame(t, slow, fast, "%s", b)
		if fast.Op != OpPublishBatch {
			return
		}
		var aux struct {
			Messages []json.RawMessage `json:"messages"`
		}
		require.NoError(t, json.Unmarshal(b, &aux), "%s", b)
		require.Len(t, fast.decoded, len(aux.Messages), "%s", b)
		for i, raw := range aux.Messages {
			fm := fast.decoded[i]
			if fm == nil {
				fm, ok = decodeMessageFast(raw, nil)
				if !ok {
					continue
				}
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
						if r != nil && !path.msg(r) { // nil: decoded with the frame
							b.Fatal("message not decoded")
						}
					}
				}
				b.ReportMetric(float64(b.N*tc.msgs)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}
