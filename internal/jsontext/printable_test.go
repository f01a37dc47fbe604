package jsontext

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// printableByBytes is PrintableASCII one byte at a time.
func printableByBytes(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// TestPrintableASCII puts every byte value, and every pair of byte values
// side by side (a borrow or carry out of one must not hide the other), at
// every position of a word and of the tail.
func TestPrintableASCII(t *testing.T) {
	base := []byte("abcdefghijklmnopqrs")
	for pos := range base {
		for c := range 256 {
			s := append([]byte(nil), base...)
			s[pos] = byte(c)
			require.Equal(t, printableByBytes(string(s)), PrintableASCII(string(s)), "byte %#x at %d", c, pos)
		}
	}
	for pos := 0; pos+1 < 16; pos++ {
		for a := range 256 {
			for _, b := range []byte{0x00, 0x1f, 0x20, 0x21, 0x7e, 0x7f, 0x80, 0xa0, 0xff} {
				s := append([]byte(nil), base...)
				s[pos], s[pos+1] = byte(a), b
				require.Equal(t, printableByBytes(string(s)), PrintableASCII(string(s)), "%#x %#x at %d", a, b, pos)
				s[pos], s[pos+1] = b, byte(a)
				require.Equal(t, printableByBytes(string(s)), PrintableASCII(string(s)), "%#x %#x at %d", b, a, pos)
			}
		}
	}
	require.True(t, PrintableASCII(""))
}

func FuzzPrintableASCII(f *testing.F) {
	for _, s := range []string{"", "payments.authorize", "a\x7fb", "tab\there", "é", "\u202e", "0123456789abcdef\x1f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		require.Equal(t, printableByBytes(s), PrintableASCII(s), "%q", s)
	})
}
