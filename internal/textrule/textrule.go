// Package textrule is the broker's one reading of "a control character"
// in text that may be shown to an operator: a name (an id, a principal, a
// subject, a group, a catalog's or a manifest's names), an attribute, an
// audit text. Every place that refuses or escapes such a character asks
// it, so that a name refused in one place is refused in all.
//
// The rule refuses two kinds of character:
//
//   - a control character, as unicode.IsControl reads one: C0 (U+0000
//     to U+001F, tab, newline and carriage return included), DEL (U+007F)
//     and C1 (U+0080 to U+009F; U+009B is CSI), which drive the terminal
//     that shows them;
//   - a formatting character that reorders the text around it or breaks
//     its line (Unicode's bidirectional controls, the "Trojan Source"
//     class, CVE-2021-42574): U+061C ARABIC LETTER MARK, U+200E
//     LEFT-TO-RIGHT MARK and U+200F RIGHT-TO-LEFT MARK; U+202A to U+202E,
//     the embeddings and overrides (U+202E RIGHT-TO-LEFT OVERRIDE shows
//     "alice\u202Egnp.exe" as "aliceexe.png"); U+2066 to U+2069, the
//     isolates; U+2028 LINE SEPARATOR and U+2029 PARAGRAPH SEPARATOR,
//     newlines to JavaScript and to some terminals and log viewers.
//
// Other formatting characters are text: U+200C ZERO WIDTH NON-JOINER and
// U+200D ZERO WIDTH JOINER write Persian, Indic scripts and emoji
// sequences, and reorder nothing.
//
// A place that allows some of these on purpose (tab and newline in an
// expression laid out over lines, say) says so beside its own check, and
// refuses the rest with IsControlRune; a place with a rule of its own
// besides (U+FFFD in a principal claim) adds it to this one.
package textrule

import "unicode"

// HasControl reports whether s holds a character of the rule: a control
// character (IsControlRune) or a formatting character that reorders or
// breaks a line (IsFormatting). On valid UTF-8 it is
// strings.ContainsFunc(s, IsControlRune); on bytes that are not UTF-8 it
// finds every such character that is encoded whole, and reads no byte
// past the end of s. Whether s is UTF-8 is for the caller to check.
//
// It runs on every message the broker takes (the message id and each
// name the publisher sets) and on every audit record, so it decodes no
// rune but reads bytes, each passed on one table read (controlStart) but
// C0, DEL and the three that start a sequence it looks into: 0xC2 (C1:
// 0xC2 then 0x80 to 0x9F), 0xD8 (U+061C: 0xD8 0x9C) and 0xE2 (U+200E to
// U+2069: 0xE2, then 0x80 or 0x81, then one byte).
func HasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !controlStart[c] {
			continue // printable ASCII, or a byte of no sequence looked into
		}
		switch c {
		case 0xc2:
			if i+1 < len(s) && s[i+1] >= 0x80 && s[i+1] < 0xa0 {
				return true
			}
		case 0xd8:
			if i+1 < len(s) && s[i+1] == 0x9c {
				return true
			}
		case 0xe2:
			if i+2 < len(s) && formatting(s[i+1], s[i+2]) {
				return true
			}
		default:
			return true // C0 or DEL
		}
	}
	return false
}

// IsControlRune reports whether r is a character of the rule, for code
// that reads runes: a control character (unicode.IsControl: C0, DEL, C1)
// or a formatting character that reorders or breaks a line
// (IsFormatting).
func IsControlRune(r rune) bool { return unicode.IsControl(r) || IsFormatting(r) }

// IsFormatting reports whether r is one of the formatting characters of
// the rule, those that reorder the text around them or break its line:
// U+061C, U+200E, U+200F, U+2028 to U+202E and U+2066 to U+2069. A
// control character is not one (IsControlRune is both).
func IsFormatting(r rune) bool {
	switch {
	case r == 0x061c, r == 0x200e, r == 0x200f:
		return true
	case r >= 0x2028 && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// controlStart marks the bytes HasControl stops at: C0 and DEL, each a
// control character, and 0xC2, 0xD8 and 0xE2, which start one it looks
// into.
var controlStart = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t[0x7f], t[0xc2], t[0xd8], t[0xe2] = true, true, true, true
	return t
}()

// formatting reports whether 0xE2 then b1 and b2 is one of the
// formatting characters HasControl refuses: U+200E, U+200F, U+2028 to
// U+202E (0xE2 0x80 then 0x8E, 0x8F, 0xA8 to 0xAE) or U+2066 to U+2069
// (0xE2 0x81 then 0xA6 to 0xA9).
func formatting(b1, b2 byte) bool {
	switch b1 {
	case 0x80:
		return b2 == 0x8e || b2 == 0x8f || b2 >= 0xa8 && b2 <= 0xae
	case 0x81:
		return b2 >= 0xa6 && b2 <= 0xa9
	}
	return false
}

// Formatting returns the formatting characters the rule refuses besides
// control characters (those IsFormatting reports), in order: U+061C,
// U+200E, U+200F, U+2028 to U+202E and U+2066 to U+2069. A new slice each
// call; tests of the rule's callers drive names through it.
func Formatting() []rune {
	return []rune{0x061c, 0x200e, 0x200f, 0x2028, 0x2029, 0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068, 0x2069}
}
