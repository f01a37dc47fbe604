package jsontext

import "unicode/utf8"

// StringLen returns len(AppendString(nil, s)), the length of s as a JSON
// string escaped as encoding/json escapes it, without writing it: a
// caller that holds output to a byte budget counts a value's strings
// before it copies the value.
func StringLen(s string) int {
	n := len(s) + 2
	var esc [6]byte
	for i := 0; i < len(s); {
		if i = safeEnd(s, i); i == len(s) {
			break
		}
		if c := s[i]; c < utf8.RuneSelf {
			n += len(appendEscape(esc[:0], c)) - 1
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
			n += len(`\ufffd`) - size // \ufffd, \u2028 and \u2029 alike
		}
		i += size
	}
	return n
}
