package pigeon

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"pigeon/internal/textrule"
)

// formattingRunes are the formatting characters hasControl refuses
// besides control characters (internal/textrule checks the list against
// a reference of its own).
var formattingRunes = textrule.Formatting()

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

// isControlOrFormatting is hasControl read a rune at a time: the
// reference the byte scan is checked against (internal/textrule checks it
// on every rune).
var isControlOrFormatting = textrule.IsControlRune

// hasControl and IsControlRune are the rule of internal/textrule, where
// it is tested and fuzzed against a rune-by-rune reference: the root
// reads no rule of its own. hasControl refuses each formatting rune and
// each control character wherever it stands in a name, passes the text
// around them, and agrees with the reference and with textrule.HasControl
// on every case; IsControlRune agrees with the reference on every rune.
func TestHasControlIsTheTextRule(t *testing.T) {
	var cases []string
	for _, r := range formattingRunes {
		cases = append(cases, string(r), "alice"+string(r)+"gnp.exe", "orders."+string(r))
	}
	for _, s := range formattingNeighbours {
		cases = append(cases, s, "orders."+s+".created")
	}
	cases = append(cases, "", "orders.created", "a\x1b[2J", "\u009b2J", "x\r", "\x7f", "\t", "\xe2", "\xe2\x80", "\xd8", "\xc2")
	for _, s := range cases {
		want := strings.ContainsFunc(s, isControlOrFormatting) && utf8.ValidString(s)
		require.Equal(t, want, hasControl(s), "%q", s)
		require.Equal(t, textrule.HasControl(s), hasControl(s), "%q", s)
	}
	for r := rune(0); r < 0x3000; r++ {
		if isControlOrFormatting(r) != hasControl(string(r)) {
			t.Fatalf("hasControl(%q) is %v", string(r), hasControl(string(r)))
		}
		if isControlOrFormatting(r) != IsControlRune(r) {
			t.Fatalf("IsControlRune(U+%04X) is %v", r, IsControlRune(r))
		}
	}
}

// An audit record keeps a text with a formatting character quoted, as it
// keeps one with a control character: a stored record from before the
// names were refused, or a name the broker records without knowing it (a
// subject it was asked for), shows as what it is, escapes and all.
func TestAuditTextQuotesFormattingCharacters(t *testing.T) {
	for _, r := range formattingRunes {
		in := "alice" + string(r) + "gnp.exe"
		got := auditText(in)
		require.Equal(t, strconv.Quote(in), got)
		require.Contains(t, got, fmt.Sprintf(`\u%04x`, r))
		require.False(t, strings.ContainsFunc(got, isControlOrFormatting), "%q", got)
	}
	require.Equal(t, `"alice\u202egnp.exe"`, auditText("alice\u202egnp.exe"))
	require.Equal(t, `"line one\u2028line two"`, auditText("line one\u2028line two"))
	for _, s := range formattingNeighbours {
		require.Equal(t, s, auditText(s), "text that reorders nothing is kept as it is")
	}
}
