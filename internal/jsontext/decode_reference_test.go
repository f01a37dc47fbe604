package jsontext

import (
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// heard records what a NameSink hears, and whether each name came as
// plain ASCII (AddASCII).
type heard struct {
	names []string
	ascii []bool
}

func (h *heard) Reset()            { h.names, h.ascii = append(h.names, "<object>"), append(h.ascii, false) }
func (h *heard) Add(name string)   { h.names, h.ascii = append(h.names, name), append(h.ascii, false) }
func (h *heard) AddASCII(n string) { h.names, h.ascii = append(h.names, n), append(h.ascii, true) }

// plainHeard is a NameSink that is not an ASCIINameSink.
type plainHeard struct{ names []string }

func (h *plainHeard) Reset()          { h.names = append(h.names, "<object>") }
func (h *plainHeard) Add(name string) { h.names = append(h.names, name) }

// sameValue reports whether a and b are the same decoded value, a zero's
// sign included (reflect.DeepEqual takes -0 for 0).
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !sameValue(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

// compareWithReference holds DecodeDocument to the long way
// (decodeDocument, long) on in, which reads every number with ParseFloat
// and every name with str:
// the same error, value (signed zeros and all), text and Exact, and the
// same names heard, by a sink that takes plain names apart and by one that
// does not; a name told plain holds no byte beyond ASCII.
func compareWithReference(t *testing.T, in string, maxDepth int) {
	var refNames plainHeard
	want, werr := decodeDocument([]byte(in), maxDepth, &refNames, true)
	var h heard
	got, gerr := DecodeDocument([]byte(in), maxDepth, &h)
	require.Equal(t, werr, gerr, "%q: error", in)
	require.True(t, sameValue(want.Value, got.Value), "%q: reference %#v, decoder %#v", in, want.Value, got.Value)
	require.Equal(t, string(want.Text), string(got.Text), "%q: text", in)
	require.Equal(t, want.Exact, got.Exact, "%q: Exact", in)
	if werr == nil {
		require.Equal(t, refNames.names, h.names, "%q: names heard", in)
	}
	for i, n := range h.names {
		if h.ascii[i] {
			require.True(t, ASCII(n) && !strings.Contains(n, `"`), "%q: %q told plain", in, n)
		}
	}
	var p plainHeard
	_, perr := DecodeDocument([]byte(in), maxDepth, &p)
	require.Equal(t, werr, perr, "%q: error with a plain sink", in)
	if werr == nil {
		require.Equal(t, refNames.names, p.names, "%q: names heard by a plain sink", in)
	}
	compareFlat(t, in, maxDepth, want, werr, refNames.names)
}

// compareFlat holds DecodeFlat to want and werr, DecodeDocument's answer
// on in, and names, the names it heard: the same error, text, Exact and
// names, and a value in the flat form (flatShape) that Tree makes want;
// in memory of its own, and in an Arena used before, whose earlier
// document is still there until the arena is reused.
func compareFlat(t *testing.T, in string, maxDepth int, want Document, werr error, names []string) {
	var ar Arena
	before, err := DecodeFlat([]byte(`{"s":"before","n":[1.5,{"o":"x"}]}`), dataDepth, nil, &ar)
	require.NoError(t, err)
	beforeTree := Tree(before.Value)
	for round, arena := range []*Arena{nil, &ar, &ar} {
		var h heard
		flat, ferr := DecodeFlat([]byte(in), maxDepth, &h, arena)
		require.Equal(t, werr, ferr, "%q: DecodeFlat's error", in)
		if werr == nil {
			require.Equal(t, string(want.Text), string(flat.Text), "%q: DecodeFlat's text", in)
			require.Equal(t, want.Exact, flat.Exact, "%q: DecodeFlat's Exact", in)
			require.Equal(t, names, h.names, "%q: names DecodeFlat told", in)
			flatShape(t, in, flat.Value)
			require.True(t, sameValue(want.Value, Tree(flat.Value)), "%q: DecodeDocument %#v, Tree of DecodeFlat %#v", in, want.Value, flat.Value)
		}
		switch round {
		case 1:
			require.True(t, sameValue(beforeTree, Tree(before.Value)), "%q: the arena's earlier document is as it was", in)
			ar.ReuseObjects()
			require.Equal(t, map[string]any{"s": "before", "n": []any{1.5, map[string]any{"o": "x"}}}, beforeTree, "strings and numbers outlive ReuseObjects")
		case 2:
			ar.Reuse()
		}
	}
}

// flatShape checks that v is in the flat form: every object of at most
// linearDups members an Object, every larger one a map, and each Object
// answers Get for its members' names.
func flatShape(t *testing.T, in string, v any) {
	switch x := v.(type) {
	case map[string]any:
		require.Greater(t, len(x), linearDups, "%q: a small object decoded as a map", in)
		for _, e := range x {
			flatShape(t, in, e)
		}
	case Object:
		require.LessOrEqual(t, len(x), linearDups, "%q: a large object decoded as an Object", in)
		for _, m := range x {
			got, ok := x.Get(m.Name)
			require.True(t, ok && sameValue(m.Value, got), "%q: Get(%q)", in, m.Name)
			flatShape(t, in, m.Value)
		}
	case []any:
		for _, e := range x {
			flatShape(t, in, e)
		}
	}
}

// referenceCases add, to jsonCases, number forms on both sides of
// shortNumber's bounds and names that are not plain.
var referenceCases = []string{
	`0`, `-0`, `-0.0`, `0.0`, `00`, `-00`, `01`, `-01`, `0.`, `-.5`, `1.`, `1.5.`, `1..5`, `+1`, `--1`,
	`123456789012345`, `-123456789012345`, `1234567890123456`, `12345678901234.5`, `1234567890123.45`,
	`0.123456789012345`, `0.1234567890123456`, `0.000000000000001`, `0.0000000000000001`, `999999999999999`,
	`9007199254740993`, `18446744073709551616`, `42.5`, `0.1`, `0.2`, `0.3`, `1.1`, `2.675`, `100.000`,
	`1e5`, `1E5`, `1.5e-3`, `-0e0`, `1e999`, `1e1000`, `{"a":-0,"b":[0.5,-0.25,1.]}`, `[1,2.5,-3,4e2]`,
	`{"a":1}x`, `[1x]`, `{"n":12a}`, `[-]`, `[0.1e]`,
	`{"é":1,"a":2}`, `{"a\u0062":1,"c":2}`, `{"a\"b":1}`, "{\"a\xffb\":1}", "{\"a\x01\":1}", `{"\ud800":1}`,
	`{"merchantId":"m-100","orderId":"o-7f3a9c21","amount":42.5,"currency":"GBP","paymentToken":"tok_9f8e7d6c5b4a3921","customerId":"cust-42","channel":"web","description":"Order o-7f3a9c21: 2 items, standard delivery","metadata":{"cartId":"cart-5521","ab":"b12"}}`,
	`{"a":1,"a":2}`, `{"a":{"x":1,"x":2}}`, `{"a":1,"\u0061":2}`, `[[[[1]]]]`, `{"a":{"b":{"c":{}}}}`,
	// Strings that leave the plain run and come back to it: after a
	// multi-byte character, after an escape, a fault far into a run.
	`["héllo wörld, a long plain run after each"]`, `["日本語のテキストと ASCII the rest of the way"]`,
	`["a\n plain run after an escape, long enough\t\u00e9 and more plain text"]`,
	`{"ab\u0063defghijklmnop":1,"abcdefghijklmnop":2}`, `{"abcdefghijklmnop":1,"ab\u0063defghijklmnop":2}`,
	"[\"a long plain run before invalid UTF-8 \xc3\x28 after\"]", "[\"\\n then a long plain run, then \xff\"]",
	"[\"é then a long plain run, then a control \x1f\"]", "[\"\\t then a long plain run, then a control \x1f\"]",
	"[\"a long plain run, then a surrogate in UTF-8 \xed\xa0\x80\"]", `["a long plain run, then \ud800 lone"]`,
	`["é\q bad escape after a character"]`, `["a long plain run, unterminated é`, `["a long plain run, unterminated \n`,
	// Names of one length and first and last byte (nameBit), and not.
	`{"ab":1,"aab":2,"acb":3,"ab":4}`, `{"axb":1,"ayb":2,"azb":3}`, `{"":1,"":2}`, `{"":1,"a":2}`,
	`{"ba":1,"ab":2,"ab":3}`, `{"x":{"y":1},"y":{"x":1,"x":2}}`,
}

func TestDecodeDocumentMatchesReference(t *testing.T) {
	for _, in := range append(append([]string(nil), jsonCases...), referenceCases...) {
		for _, depth := range []int{dataDepth, 2} {
			compareWithReference(t, in, depth)
		}
	}
	for _, n := range []int{1, 15, 16, 17, 400} {
		digits := strings.Repeat("7", n)
		for _, in := range []string{digits, "-" + digits, "0." + digits, digits + ".5", "1." + digits} {
			compareWithReference(t, in, dataDepth)
		}
	}
}

// TestShortNumberMatchesParseFloat: every number shortNumber reads is
// ParseFloat's double, bit for bit, and one ExactNumber accepts.
func TestShortNumberMatchesParseFloat(t *testing.T) {
	var ins []string
	for _, f := range []string{"", ".5", ".05", ".123456", ".999999999999"} {
		for _, n := range []string{"0", "1", "9", "42", "1000", "123456789", "9999999999", "99999999999999", "999999999999999"} {
			ins = append(ins, n+f, "-"+n+f)
		}
	}
	for i := range 2000 {
		ins = append(ins, strconv.FormatFloat(float64(i)*0.37-300, 'f', -1, 64), strconv.Itoa(i*i*i*i))
	}
	for _, in := range ins {
		f, end, ok := shortNumber(in, 0)
		if !ok {
			continue
		}
		require.Equal(t, len(in), end, in)
		want, err := strconv.ParseFloat(in, 64)
		require.NoError(t, err, in)
		require.Equal(t, math.Float64bits(want), math.Float64bits(f), "%s: %v, ParseFloat %v", in, f, want)
		require.True(t, ExactNumber(in), in)
	}
}

func FuzzDecodeDocumentReference(f *testing.F) {
	for _, c := range append(append([]string(nil), jsonCases...), referenceCases...) {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, in string) {
		compareWithReference(t, in, 8)
		if f, end, ok := shortNumber(in, 0); ok {
			want, err := strconv.ParseFloat(in[:end], 64)
			require.NoError(t, err, in)
			require.Equal(t, math.Float64bits(want), math.Float64bits(f), "%q", in)
			require.True(t, ExactNumber(in[:end]), "%q", in)
		}
	})
}
