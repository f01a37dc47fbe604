package jsontext

// The pieces of JSON scanning that Validate, Decode and Canonical share.

import "unicode/utf16"

// Text is the input the scanners read: a string or a byte slice.
type Text interface{ ~string | ~[]byte }

// Hex4 reads the four hex digits of a \u escape at s[i:i+4].
func Hex4[T Text](s T, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for j := i; j < i+4; j++ {
		c := s[j]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r*16 + rune(c)
	}
	return r, true
}

// NumberEnd scans the JSON number (RFC 8259 grammar) that starts at s[i]
// and returns the index just past it; ok is false when the text there is
// not a number, with end where the scan stopped.
func NumberEnd[T Text](s T, i int) (end int, ok bool) {
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	default:
		return i, false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return i, false
		}
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return i, false
		}
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	}
	return i, true
}

// escapeFault says why escape refused a sequence.
type escapeFault uint8

const (
	escapeOK        escapeFault = iota
	escapeTruncated             // the text ends after the backslash
	escapeUnknown               // a letter JSON defines no escape for
	escapeBadHex                // \u without four hex digits
	escapePairHex               // a high surrogate, then \u without four hex digits
	escapeLone                  // a surrogate that is not a high half completed by a low half
)

// kind is how Validate and Decode refuse a fault: a lone surrogate (which
// encoding/json would replace with U+FFFD) as invalid UTF-8, anything else
// as malformed JSON.
func (f escapeFault) kind() Kind {
	switch f {
	case escapePairHex, escapeLone:
		return KindInvalidUTF8
	}
	return KindSyntax
}

// escape reads the escape sequence at s[i], a backslash (RFC 8259 section
// 7), and returns the character and the index just past the sequence. A
// \u escape of a UTF-16 surrogate must be a high half that the next \u
// escape completes with a low half; the pair is one character. On a fault,
// end is where it was found: the backslash for a truncated or unknown
// escape, the missing hex digits, or just past the \u escape that should
// have been followed by (or was not) a low half.
func escape[T Text](s T, i int) (r rune, end int, f escapeFault) {
	if i+1 >= len(s) {
		return 0, i, escapeTruncated
	}
	switch e := s[i+1]; e {
	case '"', '\\', '/':
		return rune(e), i + 2, escapeOK
	case 'b':
		return '\b', i + 2, escapeOK
	case 'f':
		return '\f', i + 2, escapeOK
	case 'n':
		return '\n', i + 2, escapeOK
	case 'r':
		return '\r', i + 2, escapeOK
	case 't':
		return '\t', i + 2, escapeOK
	case 'u':
		return escapeU(s, i)
	}
	return 0, i, escapeUnknown
}

// escapeU is escape for a \u escape at s[i].
func escapeU[T Text](s T, i int) (r rune, end int, f escapeFault) {
	r, ok := Hex4(s, i+2)
	if !ok {
		return 0, i + 2, escapeBadHex
	}
	i += 6
	if !utf16.IsSurrogate(r) {
		return r, i, escapeOK
	}
	if r >= 0xDC00 || i+1 >= len(s) || s[i] != '\\' || s[i+1] != 'u' {
		return 0, i, escapeLone
	}
	lo, ok := Hex4(s, i+2)
	if !ok {
		return 0, i + 2, escapePairHex
	}
	if lo < 0xDC00 || lo > 0xDFFF {
		return 0, i + 6, escapeLone
	}
	return utf16.DecodeRune(r, lo), i + 6, escapeOK
}

// spaceEnd returns the index of the first byte at or after s[i] that is not
// JSON whitespace (space, tab, line feed, carriage return).
func spaceEnd[T Text](s T, i int) int {
	for i < len(s) {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}
