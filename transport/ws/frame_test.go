package ws_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

func TestDecodeFrame(t *testing.T) {
	tests := []struct {
		name, in string
		op, id   string
		err      bool
	}{
		{"ping", `{"op":"ping","id":"1"}`, "ping", "1", false},
		{"spaces", " \n\t{\"op\":\"ping\",\"id\":\"1\"} ", "ping", "1", false},
		{"unknown fields", `{"op":"ping","id":"1","future":{"x":[1]}}`, "ping", "1", false},
		{"publish", `{"op":"publish","id":"p","message":{"subject":"a"}}`, "publish", "p", false},
		{"empty", ``, "", "", true},
		{"null", `null`, "", "", true},
		{"array", `[]`, "", "", true},
		{"bad json", `{"op":`, "", "", true},
		{"no op", `{"id":"1"}`, "", "1", true},
		{"wrong type keeps id", `{"id":"1","op":"receive","max":"x"}`, "receive", "1", true},
		{"too deep keeps id", `{"op":"publish","id":"d","message":{"data":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}}`, "", "d", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ws.DecodeFrame([]byte(tc.in))
			if tc.err {
				require.Error(t, err)
				require.Equal(t, pigeon.CodeBadRequest, pigeon.ErrorCode(err))
				if tc.id != "" {
					require.NotNil(t, f)
					require.Equal(t, tc.id, f.ID)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.op, f.Op)
			require.Equal(t, tc.id, f.ID)
		})
	}
}

// FuzzDecodeFrame feeds arbitrary bytes to the frame decoder: it never
// panics, a frame it accepts has an op, and what it accepts survives a
// round trip through encoding/json.
func FuzzDecodeFrame(f *testing.F) {
	for _, s := range []string{
		`{"op":"ping","id":"1"}`,
		`{"op":"negotiate","id":"n","subjects":["a","b"],"ttlMs":1000}`,
		`{"op":"publish","id":"p","message":{"type":"t","subject":"s","intent":"i","data":{"x":[1,2,{"y":null}]}}}`,
		`{"op":"subscribe","id":"s","subject":"chat","selector":"/kind=chat","filter":"true","group":"g","maxInFlight":3,"start":{"sequence":4}}`,
		`{"op":"nack","id":"k","sub":"sub_1","messageId":"m","delayMs":-5}`,
		`{"op":"replay","id":"r","subject":"s","reason":"why","fromSequence":1,"toSequence":18446744073709551615}`,
		`{"op":"error","re":"x","error":{"code":"BAD_REQUEST","message":"m","details":{"decision":{"outcome":"deny"}}}}`,
		`{"op":"deliver","sub":"s","attempt":2,"message":{}}`,
		`{"op":"publish_batch","id":"b","messages":[{"type":"t"},null,5,{"type":5},[]]}`,
		`{"op":"publish","id":"p","hops":2,"message":{"type":"t","hops":5}}`, `{"op":"publish","id":"p","hops":4294967296,"message":{}}`,
		`{"op":"decisions","re":"b","results":[{"status":"accepted","message":{"id":"m","sequence":1}},{"error":{"code":"RATE_LIMITED","message":"m","details":{}}}]}`,
		`{"op":"\u0000","id":"\ud800"}`,
		`{"op":1}`, `[`, `{}`, ` `, `{"op":"a","id":"b","messages":[{},1,"x"]}`,
		`{"op":"ping","id":"a","id":"b"}`, `{"op":"publish","id":"p","message":{"data":{"k":1,"\u006b":2}}}`, "{\"op\":\"ping\",\"id\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := ws.DecodeFrame(b)
		if err != nil {
			switch pigeon.ErrorCode(err) {
			case pigeon.CodeBadRequest, pigeon.CodeEnvelopeInvalid, pigeon.CodeDuplicateKey, pigeon.CodeInvalidUTF8:
			default:
				t.Fatalf("error %v is not BAD_REQUEST, ENVELOPE_INVALID, DUPLICATE_KEY or INVALID_UTF8", err)
			}
			return
		}
		if !utf8.Valid(b) || pigeon.CheckJSON(b) != nil {
			t.Fatalf("accepted ambiguous text %q", b)
		}
		if fr.Op == "" {
			t.Fatal("accepted a frame without op")
		}
		out, err := json.Marshal(fr)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := ws.DecodeFrame(out)
		if err != nil {
			t.Fatalf("decode of re-encoded frame %s: %v", out, err)
		}
		if again.Op != fr.Op || again.ID != fr.ID || again.Re != fr.Re || again.Sub != fr.Sub || again.MessageID != fr.MessageID {
			t.Fatalf("round trip changed the frame: %+v vs %+v", fr, again)
		}
		if fr.Error != nil {
			_ = fr.Error.Err()
		}
	})
}
