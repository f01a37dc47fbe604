package jsontext

import (
	"math/bits"
	"unicode/utf8"
)

// PlainEnd returns the index of the first byte of b at or after i that a
// JSON string cannot hold as it is, or len(b): a quote, a backslash, a
// control character or a byte of a multi-byte UTF-8 sequence. Strings are
// mostly plain ASCII, so it looks at eight bytes at a time, then byte by
// byte only in the last few bytes of b. In a word that holds one, the
// lowest byte specialBits flags is the first such byte.
func PlainEnd[T Text](b T, i int) int {
	for ; i+8 <= len(b); i += 8 {
		if m := specialBits(word(b, i)); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for i < len(b) && plain[b[i]] {
		i++
	}
	return i
}

// word returns the eight bytes of b from b[i], the first lowest, as one
// little-endian word. Written as eight loads that the compiler merges
// into one (binary.LittleEndian.Uint64's form): through a copy into an
// array, it costs a store and a reload on the stack and a check of the
// copy's overlap, several times the scan of the word itself.
func word[T Text](b T, i int) uint64 {
	b = b[i : i+8]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// specialBits flags (sets the high bit of) each byte of x that is a
// quote, a backslash, below 0x20 or 0x80 and above. Each test may also
// flag the byte above one it flags (a borrow), never miss one. A test
// flags a byte it should not only through a borrow out of a byte below
// that it rightly flags (a borrow starts only at a byte that is a quote,
// a backslash or below 0x20; and x-0x20 sets the high bit of a byte of
// 0x20 and above only when the byte is 0xa0 or above, which x flags
// anyway): so the lowest byte flagged is always one that is not plain.
func specialBits(x uint64) uint64 {
	q := x ^ ones*'"'
	s := x ^ ones*'\\'
	return ((q-ones)&^q | (s-ones)&^s | (x - ones*0x20) | x) & highs
}

// safeEnd returns the index of the first byte of s at or after i that
// AppendString does not copy as it is, or len(s): a byte PlainEnd stops
// at, or one of the HTML-sensitive <, > and &. Eight bytes at a time, as
// PlainEnd.
func safeEnd(s string, i int) int {
	for ; i+8 <= len(s); i += 8 {
		x := word(s, i)
		a := x ^ ones*'&'
		g := (x | ones*2) ^ ones*'>' // < and > differ in bit 1 alone
		// As in PlainEnd, the lowest byte flagged is one to stop at.
		if m := specialBits(x) | ((a-ones)&^a|(g-ones)&^g)&highs; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for i < len(s) && s[i] < utf8.RuneSelf && safe[s[i]] {
		i++
	}
	return i
}

// ASCII reports whether every byte of s is below 0x80, eight bytes at a
// time.
func ASCII(s string) bool {
	var acc uint64
	i := 0
	for ; i+8 <= len(s); i += 8 {
		acc |= word(s, i)
	}
	for ; i < len(s); i++ {
		acc |= uint64(s[i])
	}
	return acc&highs == 0
}

// PrintableASCII reports whether every byte of s is printable ASCII, 0x20
// to 0x7e, eight bytes at a time: text that holds no control character,
// no DEL and nothing beyond ASCII.
func PrintableASCII(s string) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		// A byte below 0x20 borrows (sets its high bit in x-0x20), DEL
		// carries (in x+1), a byte of 0x80 and above has it set: each
		// sets a high bit. A borrow or carry may also flag the byte above
		// one flagged rightly, never hide one: the answer is exact.
		x := word(s, i)
		if ((x-ones*0x20)|(x+ones)|x)&highs != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}
