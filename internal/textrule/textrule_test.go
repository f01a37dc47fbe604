package textrule_test

import (
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"pigeon/internal/textrule"
)

// formattingRunes are the formatting characters the rule refuses besides
// control characters: they reorder the text around them or break its
// line where it is shown. The list is the reference the rule is checked
// against, written apart from it.
var formattingRunes = []rune{
	0x061c,         // ARABIC LETTER MARK
	0x200e, 0x200f, // LEFT-TO-RIGHT and RIGHT-TO-LEFT MARK
	0x2028, 0x2029, // LINE and PARAGRAPH SEPARATOR
	0x202a, 0x202b, 0x202c, 0x202d, 0x202e, // the embeddings, POP DIRECTIONAL FORMATTING, the overrides
	0x2066, 0x2067, 0x2068, 0x2069, // the isolates and POP DIRECTIONAL ISOLATE
}

// formattingNeighbours is text around the formatting runes that must stay
// allowed: other scripts, the characters whose UTF-8 shares their first
// bytes (U+2026 "…" and U+2027 before U+2028, U+202F after U+202E,
// U+2065 and U+206A around the isolates, U+061B and U+061F around U+061C),
// and the zero width joiners, which emoji, Persian and Indic scripts are
// written with and which reorder nothing.
var formattingNeighbours = []string{
	"é", "日本", "réexécution ✓", "paiements — équipe 2",
	"\u2026", "\u2027", "\u202f", "\u2065", "\u206a", "\u2070", "\u2030", "\u200b",
	"\u061b", "\u061f", "مرحبا", "שלום",
	"👩\u200d💻", "می\u200cخواهم", "क्\u200dष",
}

// isControlOrFormatting is the rule read a rune at a time, from the
// reference list: what HasControl and IsControlRune are checked against.
func isControlOrFormatting(r rune) bool {
	return slices.Contains(formattingRunes, r) || unicode.IsControl(r)
}

// HasControl refuses each formatting rune wherever it stands in a name,
// and passes the text around them, the characters whose UTF-8 starts as
// theirs and a sequence cut short included.
func TestHasControlFindsFormattingCharacters(t *testing.T) {
	for _, r := range formattingRunes {
		f := string(r)
		for _, s := range []string{f, "alice" + f + "gnp.exe", f + "orders", "orders." + f, "é" + f + "日本"} {
			require.True(t, textrule.HasControl(s), "%q", s)
		}
	}
	for _, s := range formattingNeighbours {
		require.False(t, textrule.HasControl(s), "%q", s)
		require.False(t, textrule.HasControl("orders."+s+".created"), "%q", s)
	}
	for _, s := range []string{"\xe2", "\xe2\x80", "a\xe2\x81", "\xd8", "\xc2"} {
		require.False(t, textrule.HasControl(s), "a sequence cut short: %q", s)
	}
}

// The rune predicates are the reference list and unicode.IsControl, on
// every rune of the Basic Multilingual Plane and the planes above it: no
// other character is taken for one, and none is missed.
func TestRunePredicatesAreTheRule(t *testing.T) {
	require.Equal(t, formattingRunes, textrule.Formatting())
	for r := rune(0); r <= unicode.MaxRune; r++ {
		// Plain comparisons: require on each of 1.1 million runes is slow.
		if slices.Contains(formattingRunes, r) != textrule.IsFormatting(r) {
			t.Fatalf("IsFormatting(U+%04X) is %v", r, textrule.IsFormatting(r))
		}
		if isControlOrFormatting(r) != textrule.IsControlRune(r) {
			t.Fatalf("IsControlRune(U+%04X) is %v", r, textrule.IsControlRune(r))
		}
		if utf8.ValidRune(r) && isControlOrFormatting(r) != textrule.HasControl(string(r)) {
			t.Fatalf("HasControl(%q) is %v", string(r), textrule.HasControl(string(r)))
		}
	}
}

// HasControl reads bytes where IsControlRune reads runes: on valid UTF-8
// the two must agree, every control and formatting character found and
// nothing else.
func FuzzHasControlOrFormatting(f *testing.F) {
	for _, s := range formattingNeighbours {
		f.Add(s)
	}
	for _, r := range formattingRunes {
		f.Add("a" + string(r) + "b")
	}
	for _, s := range []string{"", "orders.created", "a\x1b[2J", "\u009b2J", "\u00a0", "\u0100", "\u0180", "x\r", "\x7f", "\t", "é", "\xc2", "\xc2\x85", "\u0080\u009f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			textrule.HasControl(s) // reads no byte past the end
			return
		}
		want := strings.ContainsFunc(s, isControlOrFormatting)
		require.Equal(t, want, textrule.HasControl(s), "%q", s)
		require.Equal(t, want, strings.ContainsFunc(s, textrule.IsControlRune), "%q", s)
	})
}
