package datapath

import "unicode/utf8"

// Names summarises the member names of one object under case folding, so
// that FindIn can often skip walking the object's members: it tells, for
// an ASCII name, that no member's name folds to it (as strings.EqualFold
// compares), or that at most one may, when an exact lookup finds that one.
// A decoder fills it as it reads the object (jsontext.DecodeDocument).
//
// Each name sets one of 64 bits, picked from its length and three of its
// bytes with ASCII letters folded; two names that fold to each other pick
// the same bit. A name with a byte beyond ASCII may fold to an ASCII name
// in more than one way (U+212A KELVIN SIGN folds to k, U+017F LATIN SMALL
// LETTER LONG S to s), so one such member makes the set answer nothing.
//
// The zero Names knows nothing: FindIn then walks the object as Find
// does. Names is a value; it is safe to read from many goroutines once
// filled.
type Names struct {
	once, twice uint64
	known       bool
}

// foldBitOf returns the bit of name, an ASCII name (no byte beyond 0x7f),
// and true; for any other name it returns 0 and false.
func foldBitOf(name string) (uint64, bool) {
	for i := 0; i < len(name); i++ {
		if name[i] >= utf8.RuneSelf {
			return 0, false
		}
	}
	return foldBit(name), true
}

// foldBit is foldBitOf of a name known to be ASCII. Only length and three
// bytes are read, so it costs the same for every name.
func foldBit(name string) uint64 {
	n := len(name)
	if n == 0 {
		return 1
	}
	h := uint64(n)*0x9e3779b97f4a7c15 ^ uint64(lower(name[0]))<<8 ^ uint64(lower(name[n/2]))<<16 ^ uint64(lower(name[n-1]))<<24
	h *= 0xff51afd7ed558ccd
	return 1 << (h >> 58)
}

// lower folds an ASCII letter to lower case.
func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// Add records member name k, once Reset began the object: the summary
// knows the object's names until a name beyond ASCII is added.
func (s *Names) Add(k string) {
	for i := 0; i < len(k); i++ {
		if k[i] >= utf8.RuneSelf {
			s.known = false // until the next Reset, whatever names follow
			return
		}
	}
	s.AddASCII(k)
}

// AddASCII is Add for a name k known to hold no byte beyond ASCII
// (jsontext.ASCIINameSink).
func (s *Names) AddASCII(k string) {
	b := foldBit(k)
	s.twice |= s.once & b
	s.once |= b
}

// Reset makes s the summary of an object with no members yet.
func (s *Names) Reset() { *s = Names{known: true} }

// absent reports whether no member's name folds to the ASCII name whose
// bit is bit.
func (s *Names) absent(bit uint64) bool { return s.known && s.once&bit == 0 }

// single reports whether at most one member's name folds to the ASCII
// name whose bit is bit: then, when the object has a member of exactly
// that name, it is the only one that folds to it.
func (s *Names) single(bit uint64) bool { return s.known && s.twice&bit == 0 }
