package jsontext

import "math/bits"

// SkipString returns the index just past the JSON string that starts at
// the quote b[i]: past the first quote after it that an odd run of
// backslashes does not escape, or len(b) when there is none. It checks
// nothing else; callers read text that Validate accepted, or validate
// what they skipped.
func SkipString(b []byte, i int) int {
	for i++; ; i += 2 { // past the quote, then past each escape
		i = quoteOrEscape(b, i)
		if i >= len(b) {
			return len(b)
		}
		if b[i] == '"' {
			return i + 1
		}
	}
}

// quoteOrEscape returns the index of the first quote or backslash of b
// at or after i, or len(b); eight bytes at a time, as PlainEnd.
func quoteOrEscape(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := word(b, i)
		q := x ^ ones*'"'
		s := x ^ ones*'\\'
		// A byte flagged through a borrow lies above one rightly flagged,
		// so the lowest flagged is one to stop at.
		if m := ((q-ones)&^q | (s-ones)&^s) & highs; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' {
			return i
		}
	}
	return len(b)
}

// SkipValue returns the index just past the JSON value that starts at
// b[i], found by matching brackets outside strings (a literal or number
// ends at the next delimiter), or len(b) when it does not end. Like
// SkipString it checks nothing else.
func SkipValue(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		return SkipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = SkipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	}
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// SpaceEnd returns the index of the first byte at or after i that is not
// JSON white space. Compact JSON has none, and a walker asks at every
// token: that case is answered inline where it is asked, and only white
// space takes the loop.
func SpaceEnd(b []byte, i int) int {
	if i < len(b) && b[i] > ' ' {
		return i
	}
	return spaceEnd(b, i)
}
