package jsontext

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// Canonical returns the RFC 8785 JSON Canonicalization Scheme (JCS) form
// of the JSON document raw: no insignificant whitespace; object members
// sorted by their names' UTF-16 code units; strings with the minimal escapes
// (\" \\ \b \f \n \r \t, other controls as \u00xx, everything else as UTF-8);
// numbers as IEEE 754 doubles in ECMAScript's shortest form (1e+21, 0.000001,
// 1e-7, -0 as 0).
//
// Input that JCS cannot represent faithfully is refused rather than changed:
// invalid JSON, invalid UTF-8, lone surrogate escapes, duplicate member names,
// numbers beyond the double range, and nesting deeper than 10000. Integers
// beyond 2^53 keep only double precision (12345678901234567891 becomes
// 12345678901234567000), as JCS prescribes; send such values as strings.
func Canonical(raw []byte) ([]byte, error) {
	return AppendCanonical(make([]byte, 0, len(raw)), raw)
}

// AppendCanonical appends Canonical(raw) to b. On error it returns nil
// and a *CanonicalError.
func AppendCanonical(b, raw []byte) ([]byte, error) {
	c := canonicalizers.Get().(*canonicalizer)
	c.in, c.i, c.out = raw, 0, b
	out, err := c.run()
	c.in, c.out = nil, nil
	if cap(c.names) <= maxPooledBytes && cap(c.tmp) <= maxPooledBytes && cap(c.members) <= maxPooledBytes/32 {
		c.names, c.members, c.tmp = c.names[:0], c.members[:0], c.tmp[:0]
		canonicalizers.Put(c)
	}
	return out, err
}

func (c *canonicalizer) run() ([]byte, error) {
	c.skip()
	if err := c.value(0); err != nil {
		return nil, err
	}
	c.skip()
	if c.i != len(c.in) {
		return nil, c.fail("data after the JSON value")
	}
	return c.out, nil
}

// canonicalizers recycles the scratch space of canonicalizers.
var canonicalizers = sync.Pool{New: func() any { return new(canonicalizer) }}

// maxPooledBytes bounds the buffers that the canonicalizer pool keeps for
// reuse.
const maxPooledBytes = 64 << 10

// canonicalMaxDepth matches encoding/json's nesting limit.
const canonicalMaxDepth = 10000

// canonicalizer parses JSON and writes the canonical form in one pass. An
// object's members are written in input order and then, when out of order,
// permuted in place; member names are kept decoded in a stack-like arena.
type canonicalizer struct {
	in      []byte
	i       int
	out     []byte
	names   []byte      // decoded member names of the open objects
	members []jcsMember // members of the open objects
	tmp     []byte
}

type jcsMember struct {
	name, nameEnd int // decoded name in names
	start, end    int // `"name":value` in out
}

// ErrNoCanonicalForm is wrapped by every Canonical error.
var ErrNoCanonicalForm = errors.New("pigeon: JSON has no canonical form")

// CanonicalError is the reason Canonical refused a text. It wraps
// ErrNoCanonicalForm.
type CanonicalError struct {
	msg string
	at  int
}

func (e *CanonicalError) Error() string { return "pigeon: JSON has no canonical form: " + e.Detail() }

// Detail is the reason and its byte offset, without the sentinel's text.
func (e *CanonicalError) Detail() string { return e.msg + " at offset " + strconv.Itoa(e.at) }

func (e *CanonicalError) Unwrap() error { return ErrNoCanonicalForm }

func (c *canonicalizer) fail(msg string) error { return &CanonicalError{msg: msg, at: c.i} }

func (c *canonicalizer) skip() { c.i = spaceEnd(c.in, c.i) }

func (c *canonicalizer) value(depth int) error {
	if c.i >= len(c.in) {
		return c.fail("unexpected end of input")
	}
	switch ch := c.in[c.i]; {
	case ch == '{':
		return c.object(depth + 1)
	case ch == '[':
		return c.array(depth + 1)
	case ch == '"':
		start := len(c.names)
		err := c.str()
		c.names = c.names[:start]
		return err
	case ch == 't':
		return c.literal("true")
	case ch == 'f':
		return c.literal("false")
	case ch == 'n':
		return c.literal("null")
	case ch == '-' || (ch >= '0' && ch <= '9'):
		return c.number()
	}
	return c.fail("invalid character")
}

func (c *canonicalizer) literal(word string) error {
	if len(c.in)-c.i < len(word) || string(c.in[c.i:c.i+len(word)]) != word {
		return c.fail("invalid literal")
	}
	c.i += len(word)
	c.out = append(c.out, word...)
	return nil
}

func (c *canonicalizer) array(depth int) error {
	if depth > canonicalMaxDepth {
		return c.fail("nesting too deep")
	}
	c.i++
	c.out = append(c.out, '[')
	c.skip()
	if c.i < len(c.in) && c.in[c.i] == ']' {
		c.i++
		c.out = append(c.out, ']')
		return nil
	}
	for {
		c.skip()
		if err := c.value(depth); err != nil {
			return err
		}
		c.skip()
		if c.i >= len(c.in) {
			return c.fail("unexpected end of input")
		}
		switch c.in[c.i] {
		case ',':
			c.i++
			c.out = append(c.out, ',')
		case ']':
			c.i++
			c.out = append(c.out, ']')
			return nil
		default:
			return c.fail("expected , or ]")
		}
	}
}

func (c *canonicalizer) object(depth int) error {
	if depth > canonicalMaxDepth {
		return c.fail("nesting too deep")
	}
	c.i++
	c.out = append(c.out, '{')
	open := len(c.out)
	base, namesBase := len(c.members), len(c.names)
	c.skip()
	if c.i < len(c.in) && c.in[c.i] == '}' {
		c.i++
		c.out = append(c.out, '}')
		return nil
	}
	sorted := true
	for {
		c.skip()
		if c.i >= len(c.in) || c.in[c.i] != '"' {
			return c.fail("expected a member name")
		}
		m := jcsMember{name: len(c.names), start: len(c.out)}
		if err := c.str(); err != nil {
			return err
		}
		m.nameEnd = len(c.names)
		c.skip()
		if c.i >= len(c.in) || c.in[c.i] != ':' {
			return c.fail("expected :")
		}
		c.i++
		c.out = append(c.out, ':')
		c.skip()
		k := len(c.members)
		c.members = append(c.members, m)
		if err := c.value(depth); err != nil {
			return err
		}
		c.members[k].end = len(c.out)
		if k > base && c.compareNames(c.members[k-1], c.members[k]) >= 0 {
			sorted = false
		}
		c.skip()
		if c.i >= len(c.in) {
			return c.fail("unexpected end of input")
		}
		switch c.in[c.i] {
		case ',':
			c.i++
			c.out = append(c.out, ',')
			continue
		case '}':
			c.i++
		default:
			return c.fail("expected , or }")
		}
		break
	}
	if !sorted {
		ms := c.members[base:]
		slices.SortStableFunc(ms, c.compareNames)
		c.tmp = c.tmp[:0]
		for j, m := range ms {
			if j > 0 {
				if c.compareNames(ms[j-1], m) == 0 {
					return c.fail("duplicate member name")
				}
				c.tmp = append(c.tmp, ',')
			}
			c.tmp = append(c.tmp, c.out[m.start:m.end]...)
		}
		copy(c.out[open:], c.tmp)
	}
	c.members, c.names = c.members[:base], c.names[:namesBase]
	c.out = append(c.out, '}')
	return nil
}

// compareNames orders member names by UTF-16 code units, as RFC 8785
// section 3.2.3 requires. UTF-8 byte order agrees with it except that a
// character above U+FFFF (a surrogate pair, 0xD800-0xDBFF first) sorts
// before U+E000-U+FFFF in UTF-16.
func (c *canonicalizer) compareNames(a, b jcsMember) int {
	x, y := c.names[a.name:a.nameEnd], c.names[b.name:b.nameEnd]
	for len(x) > 0 && len(y) > 0 {
		if x[0] == y[0] && x[0] < utf8.RuneSelf {
			x, y = x[1:], y[1:]
			continue
		}
		r1, n1 := utf8.DecodeRune(x)
		r2, n2 := utf8.DecodeRune(y)
		if r1 != r2 {
			return int(utf16Key(r1)) - int(utf16Key(r2))
		}
		x, y = x[n1:], y[n2:]
	}
	return len(x) - len(y)
}

// utf16Key maps a rune to a value that orders like its UTF-16 encoding when
// compared with a different rune.
func utf16Key(r rune) rune {
	if r >= 0x10000 {
		r1, _ := utf16.EncodeRune(r)
		return r1<<10 | (r & 0x3FF) // D800.. shifted: below E000<<10, above D7FF<<10
	}
	return r << 10
}

// str parses a string at the opening quote, writes its canonical form to
// out and its decoded bytes to names.
func (c *canonicalizer) str() error {
	c.i++
	c.out = append(c.out, '"')
	for {
		start := c.i
		for c.i < len(c.in) {
			ch := c.in[c.i]
			if ch == '"' || ch == '\\' || ch < 0x20 || ch >= utf8.RuneSelf {
				break
			}
			c.i++
		}
		c.out = append(c.out, c.in[start:c.i]...)
		c.names = append(c.names, c.in[start:c.i]...)
		if c.i >= len(c.in) {
			return c.fail("unterminated string")
		}
		switch ch := c.in[c.i]; {
		case ch == '"':
			c.i++
			c.out = append(c.out, '"')
			return nil
		case ch < 0x20:
			return c.fail("control character in string")
		case ch >= utf8.RuneSelf:
			r, n := utf8.DecodeRune(c.in[c.i:])
			if r == utf8.RuneError && n == 1 {
				return c.fail("invalid UTF-8")
			}
			c.out = append(c.out, c.in[c.i:c.i+n]...)
			c.names = append(c.names, c.in[c.i:c.i+n]...)
			c.i += n
		default: // backslash
			r, end, f := escape(c.in, c.i)
			c.i = end
			if f != escapeOK {
				return c.fail(escapeReasons[f])
			}
			c.out = appendCanonicalRune(c.out, r)
			c.names = utf8.AppendRune(c.names, r)
		}
	}
}

// escapeReasons words the escape faults in a CanonicalError.
var escapeReasons = [...]string{
	escapeTruncated: "unterminated escape",
	escapeUnknown:   "invalid escape",
	escapeBadHex:    "invalid \\u escape",
	escapePairHex:   "invalid \\u escape",
	escapeLone:      "lone surrogate",
}

// AppendCanonicalString appends s (valid UTF-8) as a JCS string.
func AppendCanonicalString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		if ch := s[i]; ch < 0x20 || ch == '"' || ch == '\\' {
			b = append(b, s[start:i]...)
			b = appendCanonicalRune(b, rune(ch))
			start = i + 1
		}
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendCanonicalRune appends r with JCS's escaping rules (RFC 8785 section
// 3.2.2.2, which are ECMAScript JSON.stringify's).
func appendCanonicalRune(b []byte, r rune) []byte {
	if r < 0x20 || r == '"' || r == '\\' {
		return appendEscape(b, byte(r))
	}
	return utf8.AppendRune(b, r)
}

// number parses a JSON number and writes its ECMAScript form.
func (c *canonicalizer) number() error {
	start := c.i
	end, ok := NumberEnd(c.in, c.i)
	c.i = end
	if !ok {
		return c.fail("invalid number")
	}
	lit := c.in[start:end]
	// An integer literal of at most 15 digits is exact as a double
	// (below 2^53) and already in ECMAScript form (JSON forbids leading
	// zeros), except -0.
	if n := len(lit); (n <= 15 || n == 16 && lit[0] == '-') && integral(lit) {
		if string(lit) == "-0" {
			lit = lit[1:]
		}
		c.out = append(c.out, lit...)
		return nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil {
		return c.fail("number out of range")
	}
	c.out = appendES6Number(c.out, f)
	return nil
}

// integral reports whether the number literal lit has neither a fraction
// nor an exponent.
func integral(lit []byte) bool {
	for _, ch := range lit {
		if ch == '.' || ch == 'e' || ch == 'E' {
			return false
		}
	}
	return true
}

// appendES6Number appends f as ECMAScript's Number.prototype.toString does
// (ECMA-262 Number::toString, RFC 8785 section 3.2.2.3). f must be finite.
func appendES6Number(b []byte, f float64) []byte {
	if f == 0 {
		return append(b, '0') // also -0
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		panic("pigeon: appendES6Number of a non-finite number")
	}
	if f < 0 {
		b = append(b, '-')
		f = -f
	}
	// Shortest digits that round-trip, nearest to f: "d.ddde±x".
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	ei := len(e) - 1
	for e[ei] != 'e' {
		ei--
	}
	exp, _ := strconv.Atoi(string(e[ei+1:]))
	var digitsBuf [24]byte
	digits := append(digitsBuf[:0], e[0])
	if ei > 1 {
		digits = append(digits, e[2:ei]...)
	}
	// value = 0.digits × 10^n, with k = len(digits).
	k, n := len(digits), exp+1
	switch {
	case k <= n && n <= 21:
		b = append(b, digits...)
		for range n - k {
			b = append(b, '0')
		}
	case 0 < n && n <= 21:
		b = append(b, digits[:n]...)
		b = append(b, '.')
		b = append(b, digits[n:]...)
	case -6 < n && n <= 0:
		b = append(b, '0', '.')
		for range -n {
			b = append(b, '0')
		}
		b = append(b, digits...)
	default:
		b = append(b, digits[0])
		if k > 1 {
			b = append(b, '.')
			b = append(b, digits[1:]...)
		}
		b = append(b, 'e')
		if n-1 >= 0 {
			b = append(b, '+')
		}
		b = strconv.AppendInt(b, int64(n-1), 10)
	}
	return b
}
