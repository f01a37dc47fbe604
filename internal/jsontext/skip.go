package jsontext

import "bytes"

// SkipString returns the index just past the JSON string that starts at
// the quote b[i]: past the first quote after it that an odd run of
// backslashes does not escape, or len(b) when there is none. It checks
// nothing else; callers read text that Validate accepted, or validate
// what they skipped.
func SkipString(b []byte, i int) int {
	i++
	// Short strings (most names and values) are stepped through; longer
	// ones searched with IndexByte.
	for n := min(len(b), i+16); i < n; i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	for i < len(b) {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return len(b)
		}
		i += q
		k := i - 1
		for b[k] == '\\' {
			k--
		}
		if (i-1-k)%2 == 0 {
			return i + 1
		}
		i++
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
// JSON white space.
func SpaceEnd(b []byte, i int) int { return spaceEnd(b, i) }
