package pigeon

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// hasControl reads bytes where unicode.IsControl reads runes: on valid
// UTF-8 the two must agree, every C0, DEL and C1 character found and
// nothing else (U+00A0, the first rune after C1, and U+0100, whose
// second byte is 0x80, included).
func FuzzHasControl(f *testing.F) {
	for _, s := range []string{"", "orders.created", "a\x1b[2J", "\u009b2J", "\u0080", "\u009f", "\u00a0", "\u0100", "\u0180", "x\r", "\x7f", "\t", "é", "\xc2", "\xc2\x85"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		require.Equal(t, strings.ContainsFunc(s, unicode.IsControl), hasControl(s), "%q", s)
	})
}
