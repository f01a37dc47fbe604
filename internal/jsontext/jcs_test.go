package jsontext_test

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"pigeon/internal/jsontext"
)

// TestCanonicalRFC8785 holds Canonical to the examples of RFC 8785.
func TestCanonicalRFC8785(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"section 3.2.4 sample", `{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`, `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`},
		{"section 3.2.3 sorting", `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`, "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\"," +
			"\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := jsontext.Canonical([]byte(tt.in))
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
		})
	}
}

// TestCanonicalNumbers holds the number form to RFC 8785 appendix B.
func TestCanonicalNumbers(t *testing.T) {
	tests := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, tt := range tests {
		f := math.Float64frombits(tt.bits)
		// Each value is fed in three spellings: shortest, 17 digits and
		// exponent form; all must give the ECMAScript form.
		for _, in := range []string{
			strconv.FormatFloat(f, 'g', -1, 64),
			strconv.FormatFloat(f, 'e', 16, 64),
			strconv.FormatFloat(f, 'E', -1, 64),
		} {
			t.Run(in, func(t *testing.T) {
				got, err := jsontext.Canonical([]byte(in))
				require.NoError(t, err)
				require.Equal(t, tt.want, string(got))
			})
		}
	}
}

func TestCanonical(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"scalars", ` true `, `true`},
		{"null", `null`, `null`},
		{"empty object", "{ \t\r\n}", `{}`},
		{"empty array", `[ ]`, `[]`},
		{"nested sort", `{"b":{"z":1,"y":[{"d":0,"c":0}]},"a":[]}`, `{"a":[],"b":{"y":[{"c":0,"d":0}],"z":1}}`},
		{"sort after escapes", `{"\u0062":1,"a":2}`, `{"a":2,"b":1}`},
		{"prefix sorts first", `{"ab":1,"a":2,"":3}`, `{"":3,"a":2,"ab":1}`},
		{"integers", `[0,-0,1,-1,123456789012345,1234567890123456,12345678901234567890]`,
			`[0,0,1,-1,123456789012345,1234567890123456,12345678901234567000]`},
		{"2^53 + 1 loses precision", `9007199254740993`, `9007199254740992`},
		{"fractions and exponents", `[1.0,1.5e0,-0.0,0e10,1e21,1e20,1E-7,1e-6,0.1,100e-2,5e-324,1e-400]`,
			`[1,1.5,0,0,1e+21,100000000000000000000,1e-7,0.000001,0.1,1,5e-324,0]`},
		{"escapes made minimal", `"\/\b\f\n\r\t\u0000\u001F\u007f\u00e9\uD83D\uDE00"`,
			"\"/\\b\\f\\n\\r\\t\\u0000\\u001f\u007f\u00e9\U0001F600\""},
		{"no HTML escaping", `"<a href='x'>&amp;</a>\u2028\u2029"`, "\"<a href='x'>&amp;</a>\u2028\u2029\""},
		{"literal UTF-8 kept", `{"ключ":"值"}`, `{"ключ":"值"}`},
		{"U+FFFD kept", `"\ufffd"`, "\"\ufffd\""},
		{"duplicates in different objects", `[{"a":1},{"a":2}]`, `[{"a":1},{"a":2}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := jsontext.Canonical([]byte(tt.in))
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
			again, err := jsontext.Canonical(got)
			require.NoError(t, err)
			require.Equal(t, string(got), string(again))
		})
	}
}

func TestCanonicalRefuses(t *testing.T) {
	tests := []struct{ name, in string }{
		{"empty", ``},
		{"only space", `  `},
		{"trailing data", `{} {}`},
		{"trailing comma", `[1,]`},
		{"object trailing comma", `{"a":1,}`},
		{"unquoted name", `{a:1}`},
		{"missing colon", `{"a" 1}`},
		{"duplicate name", `{"a":1,"b":2,"a":3}`},
		{"duplicate name by escape", `{"a":1,"\u0061":2}`},
		{"duplicate nested", `{"x":{"a":1,"a":1}}`},
		{"leading zero", `01`},
		{"plus sign", `+1`},
		{"bare point", `1.`},
		{"bare exponent", `1e`},
		{"hex", `0x10`},
		{"overflow", `1e400`},
		{"negative overflow", `-1e309`},
		{"NaN", `NaN`},
		{"Infinity", `Infinity`},
		{"single quotes", `'a'`},
		{"control in string", "\"a\tb\""},
		{"unterminated string", `"abc`},
		{"bad escape", `"\x"`},
		{"short unicode escape", `"\u12"`},
		{"lone high surrogate", `"\ud800"`},
		{"lone low surrogate", `"\udc00"`},
		{"high then non-low", `"\ud800\u0041"`},
		{"high then char", `"\ud800x"`},
		{"invalid UTF-8", "\"\xff\""},
		{"encoded surrogate", "\"\xed\xa0\x80\""},
		{"overlong UTF-8", "\"\xc0\xaf\""},
		{"truncated literal", `tru`},
		{"too deep", strings.Repeat("[", 10001) + strings.Repeat("]", 10001)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := jsontext.Canonical([]byte(tt.in))
			require.Error(t, err)
			require.ErrorIs(t, err, jsontext.ErrNoCanonicalForm)
		})
	}
	deep := strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000)
	got, err := jsontext.Canonical([]byte(deep))
	require.NoError(t, err)
	require.Equal(t, deep, string(got))
}

// FuzzCanonical checks that Canonical never panics, accepts only
// what encoding/json accepts, is idempotent, and keeps the decoded value.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":[true,false,null,"x"]}`, `{"\ufb33":1,"\ud83d\ude00":2,"\u20ac":3}`,
		`[1e21,1e-7,-0,0.1,333333333.33333329,12345678901234567890]`, `"\u0000\/\"\\"`,
		`{"a":1,"a":2}`, `"\ud800"`, "\"\xff\"", ` [ {} , [ ] ] `, `1E400`, `-0.0e-0`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := jsontext.Canonical(in)
		if err != nil {
			require.ErrorIs(t, err, jsontext.ErrNoCanonicalForm)
			return
		}
		require.True(t, json.Valid(in), "accepted invalid JSON %q", in)
		require.True(t, utf8.Valid(out))
		again, err := jsontext.Canonical(out)
		require.NoError(t, err)
		require.Equal(t, string(out), string(again), "not idempotent")
		var want, got any
		require.NoError(t, json.Unmarshal(in, &want))
		require.NoError(t, json.Unmarshal(out, &got))
		require.True(t, reflect.DeepEqual(want, got), "value changed: %q -> %q", in, out)
	})
}

func ExampleCanonical() {
	out, err := jsontext.Canonical([]byte(`{ "room": "lobby", "n": 1.50, "at": 1e21, "text": "caf\u00e9" }`))
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out))
	// Output: {"at":1e+21,"n":1.5,"room":"lobby","text":"café"}
}

func BenchmarkCanonical(b *testing.B) {
	for _, bc := range []struct{ name, in string }{
		{"small", `{"room":"lobby","text":"hello there","n":3}`},
		{"sorted-1KB", benchDoc(true)},
		{"unsorted-1KB", benchDoc(false)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			in := []byte(bc.in)
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := jsontext.Canonical(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchDoc(sorted bool) string {
	var sb strings.Builder
	sb.WriteString(`{`)
	for i := range 20 {
		if i > 0 {
			sb.WriteString(`,`)
		}
		k := i
		if !sorted {
			k = 19 - i
		}
		fmt.Fprintf(&sb, `"field_%02d":{"text":"value number %d \u00e9","n":%d.25,"ok":true}`, k, i, i*1000)
	}
	sb.WriteString(`}`)
	return sb.String()
}
