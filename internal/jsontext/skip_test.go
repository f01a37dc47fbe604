package jsontext

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// skipStringRef is SkipString byte by byte: the definition the fast one
// must agree with.
func skipStringRef(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

func TestSkipString(t *testing.T) {
	long := strings.Repeat("abcdefgh", 5)
	cases := []struct {
		in   string
		want int // -1: len(in)
	}{
		{`""`, 2},
		{`"a"`, 3},
		{`"a",`, 3},
		{`"\""x`, 4},
		{`"\\"x`, 4},
		{`"\\\"x"`, 7},
		{`"` + long + `"`, 42},
		{`"` + long + `\"` + long + `"z`, 84},
		{`"` + long + `\\` + `"z`, 44},
		{`"1234567\"8"`, 12},           // the escape at the end of a word
		{`"1234567\` + `\"`, 11},       // an escaped backslash across words
		{`"12345678\u0022abcdef"`, 22}, // \u0022 is not a closing quote
		{`"é ü ✓ 🐦 and so on, long enough"x`, len(`"é ü ✓ 🐦 and so on, long enough"`)},
		{`"unterminated`, -1},
		{`"unterminated\"`, -1},
		{`"ends in a backslash\`, -1},
		{`"` + long + `\`, -1},
		{`"`, -1},
	}
	for _, c := range cases {
		want := c.want
		if want < 0 {
			want = len(c.in)
		}
		require.Equal(t, want, SkipString([]byte(c.in), 0), "%s", c.in)
		require.Equal(t, want, skipStringRef([]byte(c.in), 0), "%s", c.in)
	}
}

// FuzzSkipString holds SkipString to skipStringRef from every quote of
// the input.
func FuzzSkipString(f *testing.F) {
	for _, s := range []string{`"abc"`, `"a\"b"`, `"12345678\\"x"`, `"` + strings.Repeat(`\\`, 9) + `"`, `"é\u00e9"`, `"\`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for i := range b {
			if b[i] == '"' {
				require.Equal(t, skipStringRef(b, i), SkipString(b, i), "from %d of %q", i, b)
			}
		}
	})
}

// BenchmarkSkipValuePayment skips the 259-byte payment, as a walker skips
// a message's data.
func BenchmarkSkipValuePayment(b *testing.B) {
	in := payment
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if SkipValue(in, 0) != len(in) {
			b.Fatal("short")
		}
	}
}

// TestSpaceEnd: only space, tab, CR and LF are skipped, from i; other
// control bytes and every byte above the space stop it.
func TestSpaceEnd(t *testing.T) {
	for _, tc := range []struct {
		in   string
		i    int
		want int
	}{
		{"", 0, 0},
		{"x", 1, 1},
		{"x", 5, 5},
		{`{"a"`, 0, 0},
		{" \t\r\n{", 0, 4},
		{"  \v ", 0, 2},
		{"\x00", 0, 0},
		{"\f", 0, 0},
		{" \xc2\xa0", 0, 1},
		{"a  b", 1, 3},
		{"   ", 1, 3},
	} {
		require.Equal(t, tc.want, SpaceEnd([]byte(tc.in), tc.i), "%q from %d", tc.in, tc.i)
	}
}
