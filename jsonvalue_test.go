package pigeon

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var jsonCases = []string{
	`{"merchantId":"m-100","orderId":"o-1","amount":42.5,"currency":"GBP","paymentToken":"tok_9f8e7d6c"}`,
	`{}`, `[]`, `null`, `true`, `false`, `0`, `-0`, `1e3`, `-1.5E-3`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u00e9\ud83d\ude00"`,
	`"\ud800"`, `"\ud800\u0041"`, `"\udc00"`, "\"\xff\"", `{"a":{"b":[1,{"c":null}]}}`, ` { "a" : 1 , "a" : 2 } `,
	`{"a":1,}`, `[1,]`, `01`, `1.`, `.5`, `-`, `1e`, `"abc`, `{"a"}`, `{"a":}`, `nul`, `[1 2]`, `{} {}`, "\"a\x01\"", `"\x"`, `1e400`,
	`"\u12"`, `{"a":1`, ``, ` `,
}

func TestDecodeValueMatchesEncodingJSON(t *testing.T) {
	for _, c := range jsonCases {
		compareDecoders(t, c)
	}
	deep := strings.Repeat("[", 10001) + strings.Repeat("]", 10001)
	_, err := decodeValue([]byte(deep))
	require.Error(t, err)
}

func compareDecoders(t *testing.T, in string) {
	var want any
	werr := json.Unmarshal([]byte(in), &want)
	got, gerr := decodeValue([]byte(in))
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%q: encoding/json err=%v, decodeValue err=%v", in, werr, gerr)
	}
	if werr == nil && !reflect.DeepEqual(want, got) {
		t.Fatalf("%q: encoding/json %#v, decodeValue %#v", in, want, got)
	}
}

func FuzzDecodeValue(f *testing.F) {
	for _, c := range jsonCases {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, in string) { compareDecoders(t, in) })
}

func BenchmarkDecodeValue(b *testing.B) {
	in := []byte(jsonCases[0])
	b.Run("pigeon", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeValue(in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var v any
			if err := json.Unmarshal(in, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
