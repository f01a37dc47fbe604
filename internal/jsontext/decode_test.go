package jsontext

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// dataDepth is the broker's nesting limit for message data
// (pigeon.dataDepth).
const dataDepth = 64

// decode is Decode at the broker's data depth.
func decode(b []byte) (any, error) { return Decode(b, dataDepth) }

var jsonCases = []string{
	`{"merchantId":"m-100","orderId":"o-1","amount":42.5,"currency":"GBP","paymentToken":"tok_9f8e7d6c"}`,
	`{}`, `[]`, `null`, `true`, `false`, `0`, `-0`, `1e3`, `-1.5E-3`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u00e9\ud83d\ude00"`,
	`"\ud800"`, `"\ud800\u0041"`, `"\udc00"`, "\"\xff\"", `{"a":{"b":[1,{"c":null}]}}`, ` { "a" : 1 , "a" : 2 } `,
	`{"a":1,}`, `[1,]`, `01`, `1.`, `.5`, `-`, `1e`, `"abc`, `{"a"}`, `{"a":}`, `nul`, `[1 2]`, `{} {}`, "\"a\x01\"", `"\x"`, `1e400`,
	`"\u12"`, `{"a":1`, ``, ` `,
	objectOf(linearDups), objectOf(linearDups + 1), objectOf(40), `[` + objectOf(20) + `,[1,[2,{"x":[3]}]],` + objectOf(3) + `]`,
	objectOf(linearDups) + `x`, `{"m0":1,"m1":[` + objectOf(30) + `],"m0":2}`,
}

// objectOf is an object of n members m0..m(n-1), the even ones nested one
// level: small objects and arrays are built differently from large ones.
func objectOf(n int) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		if i%2 == 0 {
			fmt.Fprintf(&b, `"m%d":[%d,{"k":"v%d"}]`, i, i, i)
		} else {
			fmt.Fprintf(&b, `"m%d":%d`, i, i)
		}
	}
	b.WriteByte('}')
	return b.String()
}

func TestDecodeValueMatchesEncodingJSON(t *testing.T) {
	for _, c := range jsonCases {
		compareDecoders(t, c)
	}
	for _, n := range []int{dataDepth, dataDepth + 1, 10001} {
		deep := strings.Repeat("[", n) + strings.Repeat("]", n)
		_, err := decode([]byte(deep))
		if n > dataDepth {
			require.ErrorIs(t, err, ErrTooDeep)
		} else {
			require.NoError(t, err)
		}
	}
}

func TestDecodeValueRefusesAmbiguousText(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want error
	}{
		{`{"paymentToken":"4111111111111111","amount":1,"paymentToken":"tok_abc"}`, ErrDuplicateKey},
		{`{"a":{"b":[{"c":1,"c":1}]}}`, ErrDuplicateKey},
		{`{"a":1,"\u0061":2}`, ErrDuplicateKey},
		// Names compared one by one (up to linearDups members), then in a map.
		{`{"m0":0,` + objectOf(linearDups)[1:], ErrDuplicateKey},
		{objectOf(linearDups)[:len(objectOf(linearDups))-1] + `,"m3":0}`, ErrDuplicateKey},
		{objectOf(linearDups + 4)[:len(objectOf(linearDups+4))-1] + `,"m1":0}`, ErrDuplicateKey},
		{objectOf(linearDups + 4)[:len(objectOf(linearDups+4))-1] + `,"m18":0}`, ErrDuplicateKey},
		{`[` + objectOf(linearDups + 1)[:len(objectOf(linearDups+1))-1] + `,"m0":0}]`, ErrDuplicateKey},
		{"{\"a\":\"\xff\"}", ErrInvalidUTF8},
		{"{\"\xc3\":1}", ErrInvalidUTF8},
		{`{"a":"\ud800"}`, ErrInvalidUTF8},
		{`{"a":"x\udc00y"}`, ErrInvalidUTF8},
		{`{"a":"\ud83d\u0041"}`, ErrInvalidUTF8},
	} {
		_, err := decode([]byte(tt.in))
		require.ErrorIs(t, err, tt.want, tt.in)
	}
}

// compareDecoders holds Decode to encoding/json and to the edge
// validator: it refuses exactly what Validate refuses at the data
// depth limit (and numbers beyond float64, which encoding/json refuses
// too), and what it accepts it decodes as encoding/json does.
func compareDecoders(t *testing.T, in string) {
	var want any
	werr := json.Unmarshal([]byte(in), &want)
	got, gerr := decode([]byte(in))
	verr := Validate([]byte(in), dataDepth)
	switch {
	case gerr == ErrNumberExponent:
		// encoding/json reads 0e10000 as 0 and 1e-10000 as 0; Decode
		// refuses the exponent as it meets it, before any fault of the
		// text after it.
		return
	case gerr == ErrDuplicateKey || gerr == ErrInvalidUTF8 || gerr == ErrTooDeep:
		// The two may name different faults of one text (they check a
		// member's name and its value in different orders), never refuse
		// a text the other accepts.
		require.Error(t, verr, "%q: Decode %v but the validator accepts", in, gerr)
		return
	case verr != nil:
		require.Error(t, gerr, "%q: validator refuses (%v) what Decode accepts", in, verr)
	}
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%q: encoding/json err=%v, Decode err=%v", in, werr, gerr)
	}
	if werr == nil && !reflect.DeepEqual(want, got) {
		t.Fatalf("%q: encoding/json %#v, Decode %#v", in, want, got)
	}
	if gerr == nil {
		doc, err := DecodeDocument([]byte(in), dataDepth, nil)
		require.NoError(t, err)
		require.Equal(t, exactByTokens(t, in), doc.Exact, "%q: Exact", in)
	}
}

// exactByTokens reports whether ExactNumber accepts every number
// encoding/json's tokenizer finds in in.
func exactByTokens(t *testing.T, in string) bool {
	dec := json.NewDecoder(strings.NewReader(in))
	dec.UseNumber()
	exact := true
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return exact
		}
		require.NoError(t, err, in)
		if n, ok := tok.(json.Number); ok && !ExactNumber(string(n)) {
			exact = false
		}
	}
}

// TestDecodeDocumentExact: Exact is false once any number, at any depth,
// has more than 15 significant digits or a decimal exponent beyond ±300;
// strings that look like such numbers do not count.
func TestDecodeDocumentExact(t *testing.T) {
	for _, tt := range []struct {
		in    string
		exact bool
	}{
		{`{"a":1,"b":[2.5,-3e10]}`, true},
		{`{"a":"100.0000000000000001"}`, true},
		{`{"a":123456789012345}`, true},
		{`{"a":1234567890123456}`, false},
		{`{"a":{"b":[1,100.0000000000000001]}}`, false},
		{`[1e300]`, true},
		{`[1e301]`, false},
		{`[1e-400]`, false},
		{`0e999`, true},
		{`9007199254740993`, false},
		{`1.000000000000000`, true},
	} {
		doc, err := DecodeDocument([]byte(tt.in), dataDepth, nil)
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.exact, doc.Exact, tt.in)
		require.Equal(t, tt.exact, exactByTokens(t, tt.in), tt.in)
	}
}

// TestDecodeNumberRange: a number the grammar allows but a float64 cannot
// hold is ErrNumberRange, not a syntax error; one too small to tell from
// zero decodes as zero, as encoding/json does.
func TestDecodeNumberRange(t *testing.T) {
	for _, in := range []string{`1e400`, `-1e400`, `{"a":[1,1.8e308]}`, `{"a":` + strings.Repeat("9", 400) + `}`} {
		_, err := decode([]byte(in))
		require.ErrorIs(t, err, ErrNumberRange, in)
		require.NoError(t, Validate([]byte(in), dataDepth), "%s: the grammar holds", in)
	}
	for _, in := range []string{`1e-400`, `1.7976931348623157e308`, `-4.9e-324`} {
		_, err := decode([]byte(in))
		require.NoError(t, err, in)
	}
}

// TestDecodeNumberExponent: a number written with an exponent of more
// than three digits (leading zeros aside) is ErrNumberExponent, whatever
// its value; a reader of exact numbers could not hold 0e10000000000000000000
// (math/big refuses it, and the schema validator dereferenced what it
// did not get), and 1e-1000000 cost it 20 ms. Three digits, with leading
// zeros, are taken.
func TestDecodeNumberExponent(t *testing.T) {
	for _, in := range []string{`0e10000000000000000000`, `1e-10000000000000000000`, `1e-1000000`, `0e1000`, `-0.0E+1000`,
		`{"a":[1,2e-0001000]}`, `1e00001000`} {
		_, err := decode([]byte(in))
		require.ErrorIs(t, err, ErrNumberExponent, in)
		_, err = DecodeDocument([]byte(in), dataDepth, nil)
		require.ErrorIs(t, err, ErrNumberExponent, in)
		require.NoError(t, Validate([]byte(in), dataDepth), "%s: the grammar holds", in)
	}
	for _, in := range []string{`1e-999`, `0e999`, `1E+0000000000000000308`, `5e-324`, `12.5e-1`, `1e21`, `0e0`} {
		_, err := decode([]byte(in))
		require.NoError(t, err, in)
	}
	_, err := decode([]byte(`1e999`))
	require.ErrorIs(t, err, ErrNumberRange, "three digits, beyond a float: the range")
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
			if _, err := decode(in); err != nil {
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

// BenchmarkDecodePayment decodes a 259-byte payment of nine members, one
// more than a small map holds.
func BenchmarkDecodePayment(b *testing.B) {
	in := payment
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decode(in); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDecodeTextOwnsItsText checks that DecodeText's text is the input, a
// copy of it that a later write to the input does not reach, and that the
// value's strings share it.
func TestDecodeTextOwnsItsText(t *testing.T) {
	in := []byte(` {"name":"ada","tags":["x"]} `)
	v, text, err := DecodeText(in, 8)
	require.NoError(t, err)
	require.Equal(t, string(in), string(text))
	copy(in, bytes.Repeat([]byte("z"), len(in)))
	require.Equal(t, ` {"name":"ada","tags":["x"]} `, string(text))
	require.Equal(t, map[string]any{"name": "ada", "tags": []any{"x"}}, v)
	for _, bad := range []string{`{"a":1,"a":2}`, `{"a":`, "\"\xff\""} {
		v, text, err := DecodeText([]byte(bad), 8)
		require.Error(t, err, bad)
		require.Nil(t, v)
		require.Nil(t, text)
	}
}

// names records what a NameSink hears.
type names []string

func (n *names) Reset()          { *n = append(*n, "<object>") }
func (n *names) Add(name string) { *n = append(*n, name) }

func TestDecodeDocumentNames(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want []string
	}{
		{`{"b":1,"a":{"c":2},"\u0064":[{"e":3}]}`, []string{"<object>", "b", "a", "d"}},
		{` {} `, []string{"<object>"}},
		{`[{"a":1}]`, nil},
		{`"a"`, nil},
		{`null`, nil},
	} {
		var got names
		doc, err := DecodeDocument([]byte(tc.doc), 10, &got)
		require.NoError(t, err, tc.doc)
		require.Equal(t, names(tc.want), got, tc.doc)
		want, wantText, err := DecodeText([]byte(tc.doc), 10)
		require.NoError(t, err)
		require.Equal(t, want, doc.Value, "the same value as DecodeText")
		require.Equal(t, wantText, doc.Text)
	}
}
