package jsontext

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestValidate(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	tests := []struct {
		name string
		in   string
		kind Kind // 0: valid
		path string
	}{
		{"object", `{"a":1,"b":[true,false,null],"c":{"d":"e"}}`, 0, ""},
		{"whitespace", " \t\n{ \"a\" : 1 }\r\n", 0, ""},
		{"same name in sibling objects", `{"a":{"x":1},"b":{"x":2}}`, 0, ""},
		{"surrogate pair", `{"a":"\ud83d\ude00"}`, 0, ""},
		{"utf8", `{"é":"日本"}`, 0, ""},
		{"many members", `{` + members(40, false) + `}`, 0, ""},
		{"depth at limit", deep(8), 0, ""},
		{"duplicate", `{"a":1,"a":2}`, KindDuplicateKey, ""},
		{"duplicate deep", `{"data":{"card":[{"pan":1,"pan":2}]}}`, KindDuplicateKey, "/data/card/0"},
		{"duplicate by escape", `{"a":1,"\u0061":2}`, KindDuplicateKey, ""},
		{"duplicate among many", `{` + members(40, true) + `}`, KindDuplicateKey, ""},
		{"duplicate name with slash", `{"a/b~":{"x":1,"x":2}}`, KindDuplicateKey, "/a~1b~0"},
		{"invalid utf8", "{\"a\":\"\xff\"}", KindInvalidUTF8, ""},
		{"invalid utf8 in name", "{\"\xc3\":1}", KindInvalidUTF8, ""},
		{"lone high surrogate", `{"a":"\ud83d"}`, KindInvalidUTF8, ""},
		{"lone low surrogate", `{"a":"\ude00"}`, KindInvalidUTF8, ""},
		{"high then non-surrogate", `{"a":"\ud83d\u0041"}`, KindInvalidUTF8, ""},
		{"too deep", deep(9), KindTooDeep, ""},
		{"trailing", `{} {}`, KindSyntax, ""},
		{"trailing comma", `{"a":1,}`, KindSyntax, ""},
		{"bad escape", `"\x"`, KindSyntax, ""},
		{"control char", "\"\x01\"", KindSyntax, ""},
		{"leading zero", `01`, KindSyntax, ""},
		{"empty", ``, KindSyntax, ""},
		{"bad literal", `tru`, KindSyntax, ""},
		{"unterminated", `{"a":"b`, KindSyntax, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate([]byte(tt.in), 8)
			if tt.kind == 0 {
				require.NoError(t, err)
				return
			}
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, tt.kind, e.Kind, err.Error())
			if tt.kind == KindDuplicateKey {
				require.Equal(t, tt.path, e.Path)
			}
			require.NotContains(t, err.Error(), "\xff")

			if tt.kind == KindSyntax {
				return // some are about what follows the value
			}
			// The same value inside a larger text: the same refusal, at
			// the same place in it, with the same path.
			pad := `[0, ` + tt.in
			_, verr := ValidateValue([]byte(pad), len(`[0, `), 8)
			var ve *Error
			require.ErrorAs(t, verr, &ve)
			require.Equal(t, Error{Kind: e.Kind, Offset: e.Offset + len(`[0, `), Path: e.Path, Depth: e.Depth}, *ve)
		})
	}
}

func members(n int, dup bool) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		k := i
		if dup && i == n-1 {
			k = 3
		}
		b.WriteString(`"k` + strings.Repeat("x", k) + `":1`)
	}
	return b.String()
}

func TestValidateNoAllocs(t *testing.T) {
	in := []byte(`{"merchantId":"m-1","orderId":"o-1","amount":42.5,"currency":"GBP","paymentToken":"tok_abc","card":{"last4":"1111"},"tags":["a","b"]}`)
	allocs := testing.AllocsPerRun(100, func() {
		if Validate(in, 64) != nil {
			panic("invalid")
		}
	})
	require.Zero(t, allocs)
}

// FuzzValidate holds Validate to encoding/json: what it accepts,
// encoding/json accepts; what encoding/json accepts, it accepts unless the
// text has a duplicate name, invalid UTF-8 or a lone surrogate, and what
// it accepts survives a decode and re-encode unchanged in meaning.
func FuzzValidate(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":1,"a":2}`, `"\ud800"`, "\"\xff\"", `[1,[2,{"x":"\u0078"}]]`, `{"a":{"b":1},"b":{"a":2}}`, `-0.5e+10`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := Validate(b, 10000)
		// ValidateValue agrees: a text is valid when its first value is
		// and nothing but white space follows it; the end it reports is
		// where that value's text ends, for a caller that goes on after.
		end, verr := ValidateValue(b, 0, 10000)
		require.Equal(t, err == nil, verr == nil && SpaceEnd(b, end) == len(b), "%q: Validate %v, ValidateValue %d %v", b, err, end, verr)
		if verr == nil {
			require.NoError(t, Validate(b[:end], 10000), "%q: the value ends at %d", b, end)
		}
		if err == nil {
			require.True(t, json.Valid(b), "accepted what encoding/json refuses: %q", b)
			var v any
			d := json.NewDecoder(bytes.NewReader(b))
			d.UseNumber() // numbers beyond float64 are JSON too
			require.NoError(t, d.Decode(&v))
			out, err := json.Marshal(v)
			require.NoError(t, err)
			require.NoError(t, Validate(out, 10000), "re-encoding of an accepted text is refused")
			return
		}
		var e *Error
		require.ErrorAs(t, err, &e)
		if e.Kind == KindSyntax {
			require.False(t, json.Valid(b), "refused as syntax what encoding/json accepts: %q", b)
		}
		if e.Kind == KindInvalidUTF8 && json.Valid(b) {
			// encoding/json replaces what Validate refuses: either raw
			// invalid bytes or a lone surrogate escape.
			require.True(t, !utf8.Valid(b) || strings.Contains(strings.ToLower(string(b)), `\ud`), "%q", b)
		}
	})
}

func TestPlainBytes(t *testing.T) {
	for c := range 256 {
		require.Equal(t, c >= 0x20 && c < 0x80 && c != '"' && c != '\\', plain[c], "byte %#x", c)
	}
}

func BenchmarkValidate(b *testing.B) {
	frame := []byte(`{"op":"deliver_batch","sub":"sub_17","deliveries":[` + strings.Repeat(`{"attempt":1,"message":{"specversion":"1.0","id":"msg_9lapyu5l2karsczan619","type":"payment.authorization.requested","source":"spiffe://merchant-prod/ns/checkout/sa/checkout-api","subject":"payments.events","time":"2026-12-01T05:00:00.000Z","intent":"authorize_payment","idempotencyKey":"k-1","classification":"pci","region":"uk","data":{"merchantId":"m-100","orderId":"o-7f3a9c21","amount":42.5,"currency":"GBP","paymentToken":"tok_9f8e7d6c5b4a3921","customerId":"cust-42","channel":"web","description":"Order o-7f3a9c21: 2 items, standard delivery","metadata":{"cartId":"cart-5521","ab":"b12"}},"sequence":77,"acceptedAt":"2026-12-01T05:00:00.000Z"}},`, 15) + `{"attempt":1,"message":{}}]}`)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if err := Validate(frame, 72); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzPlainEnd holds PlainEnd to a byte-by-byte scan, at every start.
func FuzzPlainEnd(f *testing.F) {
	for _, s := range []string{"", "abcdefghijklmnop\"", "abcdefgh<ijklm", "a&b>c<d=?;:.-,+*", "abcdefgh>", "abcdefghijklmnop&", "abcdefgh\\ijkl", "abc\x1fdefghijk", "héllo wörld, long enough", "\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x80", "!!!!!!!!####\"", " \x20\x21\x22"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for i := 0; i <= len(b); i++ {
			want := i
			for want < len(b) && plain[b[want]] {
				want++
			}
			require.Equal(t, want, PlainEnd(b, i), "%q from %d", b, i)
			require.Equal(t, want, PlainEnd(string(b), i), "%q from %d", b, i)
			want = i
			for want < len(b) && b[want] < utf8.RuneSelf && safe[b[want]] {
				want++
			}
			require.Equal(t, want, safeEnd(string(b), i), "safeEnd %q from %d", b, i)
		}
	})
}

// TestPlainEndEveryByte: every byte value at every place of a word stops
// PlainEnd exactly when it is not plain.
func TestPlainEndEveryByte(t *testing.T) {
	for c := range 256 {
		for at := range 16 {
			b := []byte(strings.Repeat("a", 20))
			b[at] = byte(c)
			want := len(b)
			if !plain[c] {
				want = at
			}
			require.Equal(t, want, PlainEnd(b, 0), "byte %#x at %d", c, at)
			want = len(b)
			if c >= utf8.RuneSelf || !safe[c] {
				want = at
			}
			require.Equal(t, want, safeEnd(string(b), 0), "safeEnd: byte %#x at %d", c, at)
		}
	}
}

// TestASCII: every byte value at every place of a string of any length
// decides ASCII as a byte loop does.
func TestASCII(t *testing.T) {
	for n := range 20 {
		for at := range n {
			for _, c := range []byte{0, 'a', 0x7f, 0x80, 0xc3, 0xff} {
				b := []byte(strings.Repeat("a", n))
				b[at] = c
				require.Equal(t, c < 0x80, ASCII(string(b)), "byte %#x at %d of %d", c, at, n)
			}
		}
	}
	require.True(t, ASCII(""))
}

// BenchmarkValidatePayment validates a 259-byte payment as the frame
// decoders do, one message's data at a time.
func BenchmarkValidatePayment(b *testing.B) {
	in := payment
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ValidateValue(in, 0, 64); err != nil {
			b.Fatal(err)
		}
	}
}
