package jsontext

import (
	"errors"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"
)

// Decode decodes one JSON document into the same values encoding/json
// produces for an `any` (map[string]any, []any, string, float64, bool,
// nil). It accepts less: a document encoding/json would read with a loss
// is refused, so the value returned is the only one any reader can see —
// ErrDuplicateKey for an object with two members of one name,
// ErrInvalidUTF8 for invalid UTF-8 or a lone surrogate escape (encoding/json
// replaces both with U+FFFD), ErrTooDeep for more than maxDepth nested
// objects and arrays, ErrSyntax for text that is not JSON. It refuses
// exactly what Validate refuses with the same maxDepth (and numbers beyond
// float64, which encoding/json refuses too). A differential fuzz test holds
// it to encoding/json on everything else. It copies the input once into a
// string and slices keys and unescaped strings out of it, and it boxes
// string and number values from per-document slabs (box.go), so a small
// object costs a handful of allocations instead of one per token.
func Decode(b []byte, maxDepth int) (any, error) {
	v, _, err := DecodeText(b, maxDepth)
	return v, err
}

// DecodeText is Decode, and also returns the copy of b it read, which the
// strings of the value share: the bytes the value was decoded from, that
// nothing else holds. Nothing may write to them; they stay as they are
// whatever happens to b.
func DecodeText(b []byte, maxDepth int) (any, []byte, error) {
	doc, err := DecodeDocument(b, maxDepth, nil)
	return doc.Value, doc.Text, err
}

// NameSink takes the member names of a document's top-level object as
// DecodeDocument reads them.
type NameSink interface {
	// Reset is called when the document turns out to be an object, before
	// its first name.
	Reset()
	// Add is called with each member name, unescaped, in document order.
	Add(name string)
}

// ASCIINameSink is a NameSink that DecodeDocument tells which names hold
// no byte beyond ASCII, as it finds them while reading them, so that the
// sink need not look again.
type ASCIINameSink interface {
	NameSink
	// AddASCII is Add for a name that holds no byte beyond ASCII (and
	// no escape).
	AddASCII(name string)
}

// Document is one decoded JSON document.
type Document struct {
	// Value is the document as Decode returns it.
	Value any
	// Text is the copy of the bytes Value was decoded from (DecodeText).
	Text []byte
	// Exact reports that every number in Text is one ExactNumber accepts:
	// its double compares with the others as the decimal would.
	Exact bool
}

// DecodeDocument decodes b as DecodeText does and returns the document
// with what the decoder learnt of its numbers, so that readers need not
// scan Text again. When the document is an object and top is not nil, it
// also hands its member names to top; top hears nothing when the document
// is not an object, and may have heard some names when DecodeDocument
// fails.
func DecodeDocument(b []byte, maxDepth int, top NameSink) (Document, error) {
	return decodeDocument(b, maxDepth, top, false)
}

// decodeDocument is DecodeDocument; long takes the long way everywhere
// (no shortNumber, no plain names, every string read a byte at a time by
// strBytewise), the reference its tests hold the short ways to.
func decodeDocument(b []byte, maxDepth int, top NameSink, long bool) (Document, error) {
	d := valueDecoder{s: string(b), maxDepth: maxDepth, top: top, long: long}
	return decodeWith(&d)
}

// decodeWith decodes d.s with the decoder d set up as its callers say.
func decodeWith(d *valueDecoder) (Document, error) {
	d.topASCII, _ = d.top.(ASCIINameSink)
	d.slabs.hint = len(d.s) / 24
	stack := openStacks.Get().(*[]Member)
	d.open = (*stack)[:0]
	d.skip()
	v, err := d.value(0)
	if cap(d.open) <= maxOpenStack {
		*stack = d.open[:0]
		openStacks.Put(stack)
	}
	if err != nil {
		return Document{}, err
	}
	d.skip()
	if d.i != len(d.s) {
		return Document{}, ErrSyntax
	}
	return Document{Value: v, Text: unsafe.Slice(unsafe.StringData(d.s), len(d.s)), Exact: !d.inexact}, nil
}

// Refusals of Decode.
var (
	ErrSyntax       = errors.New("pigeon: malformed JSON")
	ErrDuplicateKey = errors.New("pigeon: duplicate member name")
	ErrInvalidUTF8  = errors.New("pigeon: invalid UTF-8 or lone surrogate")
	ErrTooDeep      = errors.New("pigeon: nesting too deep")
	ErrNumberRange  = errors.New("pigeon: number beyond the range of a 64-bit float")
	// ErrNumberExponent refuses a number written with an exponent of
	// more than MaxExponentDigits digits (leading zeros aside), whatever
	// its value: 0e10000000000000000000 is zero to a float, but a reader
	// of exact numbers (math/big, which the schema validator uses) cannot
	// hold its exponent, and one of 1e-1000000 costs it milliseconds.
	ErrNumberExponent = errors.New("pigeon: number written with an exponent of more than 3 digits")
)

// MaxExponentDigits is the most digits, leading zeros aside, a number's
// exponent may be written with (ErrNumberExponent): ±999 covers every
// double, whose exponents run from -324 to 308, written any way a JSON
// producer writes one.
const MaxExponentDigits = 3

// exponentTooLong reports whether the number literal lit, which the
// grammar holds, has an exponent of more than MaxExponentDigits digits
// once its leading zeros are dropped.
func exponentTooLong(lit string) bool {
	i := strings.IndexAny(lit, "eE")
	if i < 0 {
		return false
	}
	digits := strings.TrimLeft(strings.TrimLeft(lit[i+1:], "+-"), "0")
	return len(digits) > MaxExponentDigits
}

type valueDecoder struct {
	s        string
	i        int
	maxDepth int
	slabs    slabs
	top      NameSink      // nil, or where the top-level object's names go
	topASCII ASCIINameSink // top, when it is one
	inexact  bool          // a number ExactNumber refuses was read
	long     bool          // no short ways (decodeDocument)
	flat     bool          // objects of up to linearDups members as Object (DecodeFlat)

	// open holds the members (and array elements, with an empty name) of
	// the objects and arrays being decoded, innermost last: a container is
	// built once it closes, at its final size, instead of growing as it
	// fills.
	open []Member
}

// openStacks recycles the decoders' open stacks.
var openStacks = sync.Pool{New: func() any { s := make([]Member, 0, 32); return &s }}

// maxOpenStack is the largest stack returned to openStacks.
const maxOpenStack = 1024

// linearDups is the most members an object checks for a duplicate name
// by comparing names; a larger one builds its map as it is read.
const linearDups = 16

// skip moves past whitespace; compact text has none between tokens, so
// a byte above space ends it at once.
func (d *valueDecoder) skip() {
	if i := d.i; i >= len(d.s) || d.s[i] <= ' ' {
		d.i = spaceEnd(d.s, i)
	}
}

func (d *valueDecoder) value(depth int) (any, error) {
	if d.i >= len(d.s) {
		return nil, ErrSyntax
	}
	switch c := d.s[d.i]; {
	case c == '{':
		return d.object(depth + 1)
	case c == '[':
		return d.array(depth + 1)
	case c == '"':
		s, err := d.str()
		if err != nil {
			return nil, err
		}
		return d.slabs.str(s), nil
	case c == 't':
		return d.lit("true", true)
	case c == 'f':
		return d.lit("false", false)
	case c == 'n':
		return d.lit("null", nil)
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	}
	return nil, ErrSyntax
}

func (d *valueDecoder) lit(word string, v any) (any, error) {
	if len(d.s)-d.i < len(word) || d.s[d.i:d.i+len(word)] != word {
		return nil, ErrSyntax
	}
	d.i += len(word)
	return v, nil
}

func (d *valueDecoder) object(depth int) (any, error) {
	if depth > d.maxDepth {
		return nil, ErrTooDeep
	}
	d.i++ // {
	top := depth == 1 && d.top != nil
	if top {
		d.top.Reset()
	}
	d.skip()
	if d.i < len(d.s) && d.s[d.i] == '}' {
		d.i++
		if d.flat {
			return emptyObject, nil
		}
		return map[string]any{}, nil
	}
	base := len(d.open)
	defer d.close(base)
	var m map[string]any // once the object has more than linearDups members
	var seen uint64      // the nameBit of each member name so far, while m is nil
	for {
		d.skip()
		if d.i >= len(d.s) || d.s[d.i] != '"' {
			return nil, ErrSyntax
		}
		k, plain, err := d.name()
		if err != nil {
			return nil, err
		}
		if top {
			if plain && d.topASCII != nil {
				d.topASCII.AddASCII(k)
			} else {
				d.top.Add(k)
			}
		}
		d.skip()
		if d.i >= len(d.s) || d.s[d.i] != ':' {
			return nil, ErrSyntax
		}
		d.i++
		d.skip()
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		if m != nil {
			n := len(m)
			if m[k] = v; len(m) == n {
				return nil, ErrDuplicateKey
			}
		} else {
			if bit := nameBit(k); seen&bit == 0 {
				seen |= bit // no member before has k's bit: none is named k
			} else {
				for j := base; j < len(d.open); j++ {
					if d.open[j].Name == k {
						return nil, ErrDuplicateKey
					}
				}
			}
			d.open = append(d.open, Member{k, v})
			if len(d.open)-base > linearDups {
				m = make(map[string]any, 2*linearDups)
				for _, o := range d.open[base:] {
					m[o.Name] = o.Value
				}
			}
		}
		d.skip()
		if d.i >= len(d.s) {
			return nil, ErrSyntax
		}
		switch d.s[d.i] {
		case ',':
			d.i++
		case '}':
			d.i++
			if m != nil {
				return m, nil
			}
			if d.flat {
				return d.slabs.object(d.open[base:]), nil
			}
			m = make(map[string]any, len(d.open)-base)
			for _, o := range d.open[base:] {
				m[o.Name] = o.Value
			}
			return m, nil
		default:
			return nil, ErrSyntax
		}
	}
}

// nameBit is one of 64 bits picked by the length, first and last byte of
// a member name: an object whose earlier members' bits do not include a
// name's holds no member of that name, and needs no comparison to tell.
func nameBit(k string) uint64 {
	h := uint(len(k))
	if len(k) > 0 {
		h += uint(k[0])*7 + uint(k[len(k)-1])*3
	}
	return 1 << (h & 63)
}

// close drops the members of the container whose first member is at
// open[base], once it is built or refused.
func (d *valueDecoder) close(base int) {
	clear(d.open[base:])
	d.open = d.open[:base]
}

func (d *valueDecoder) array(depth int) (any, error) {
	if depth > d.maxDepth {
		return nil, ErrTooDeep
	}
	d.i++ // [
	d.skip()
	if d.i < len(d.s) && d.s[d.i] == ']' {
		d.i++
		return []any{}, nil
	}
	base := len(d.open)
	defer d.close(base)
	for {
		d.skip()
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		d.open = append(d.open, Member{Value: v})
		d.skip()
		if d.i >= len(d.s) {
			return nil, ErrSyntax
		}
		switch d.s[d.i] {
		case ',':
			d.i++
		case ']':
			d.i++
			a := make([]any, len(d.open)-base)
			for i, o := range d.open[base:] {
				a[i] = o.Value
			}
			return a, nil
		default:
			return nil, ErrSyntax
		}
	}
}

// name decodes a member name as str does, and reports whether it is
// plain: written without an escape, and every byte ASCII.
func (d *valueDecoder) name() (string, bool, error) { return d.text() }

// str decodes a string starting at the opening quote.
func (d *valueDecoder) str() (string, error) {
	v, _, err := d.text()
	return v, err
}

// text decodes the string starting at the opening quote, and reports
// whether it is plain (name). A string that is plain up to its closing
// quote is read here, its first eight bytes without a call; any other
// goes to strFrom, from the first byte that is not plain.
func (d *valueDecoder) text() (string, bool, error) {
	s := d.s
	start := d.i + 1
	i := start
	if i+8 <= len(s) {
		m := specialBits(word(s, i))
		i += bits.TrailingZeros64(m) >> 3 // eight when m is 0
		if m == 0 {
			i = PlainEnd(s, i)
		}
	} else {
		i = PlainEnd(s, i)
	}
	if d.long {
		v, err := d.strBytewise()
		return v, false, err
	}
	if i < len(s) && s[i] == '"' {
		d.i = i + 1
		return s[start:i], true, nil
	}
	v, err := d.strFrom(start, i)
	return v, false, err
}

// strFrom is str for the string whose text starts at s[start], read up
// to s[i] already (plain bytes and whole UTF-8 characters). It skips the
// plain runs eight bytes at a time (PlainEnd), after a multi-byte
// character as before the first, and stops at the first fault, as
// strBytewise, which reads the same text a byte at a time, does.
func (d *valueDecoder) strFrom(start, i int) (string, error) {
	s := d.s
	for i < len(s) {
		switch c := s[i]; {
		case c == '"':
			d.i = i + 1
			return s[start:i], nil
		case c == '\\':
			return d.strSlow(start, i)
		case c < 0x20:
			return "", ErrSyntax
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				return "", ErrInvalidUTF8
			}
			i += size
		}
		i = PlainEnd(s, i)
	}
	return "", ErrSyntax
}

// strSlow decodes a string with escapes, as encoding/json does, but
// refuses invalid UTF-8 and lone surrogates, which it would replace. The
// text from s[start] to s[i], the first escape, has been read (strFrom):
// it is copied as it is, and so is each plain run after an escape.
func (d *valueDecoder) strSlow(start, i int) (string, error) {
	s := d.s
	buf := make([]byte, 0, max(32, i-start+16))
	buf = append(buf, s[start:i]...)
	for i < len(s) {
		switch c := s[i]; {
		case c == '"':
			d.i = i + 1
			return string(buf), nil
		case c < 0x20:
			return "", ErrSyntax
		case c == '\\':
			r, end, f := escape(s, i)
			if f != escapeOK {
				if f.kind() == KindInvalidUTF8 {
					return "", ErrInvalidUTF8
				}
				return "", ErrSyntax
			}
			i = end
			buf = utf8.AppendRune(buf, r)
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				return "", ErrInvalidUTF8
			}
			buf = append(buf, s[i:i+size]...)
			i += size
		}
		run := i
		i = PlainEnd(s, i)
		buf = append(buf, s[run:i]...)
	}
	return "", ErrSyntax
}

// strBytewise decodes a string starting at the opening quote a byte at a
// time, with no fast path: the reference the long way (decodeDocument)
// reads strings and names with, that its tests hold strFrom and strSlow
// to.
func (d *valueDecoder) strBytewise() (string, error) {
	start := d.i + 1
	buf := []byte(nil) // once an escape is met
	for i := start; i < len(d.s); {
		c := d.s[i]
		switch {
		case c == '"':
			d.i = i + 1
			if buf != nil {
				return string(buf), nil
			}
			return d.s[start:i], nil
		case c < 0x20:
			return "", ErrSyntax
		case c == '\\':
			if buf == nil {
				buf = append(make([]byte, 0, 32), d.s[start:i]...)
			}
			r, end, f := escape(d.s, i)
			if f != escapeOK {
				if f.kind() == KindInvalidUTF8 {
					return "", ErrInvalidUTF8
				}
				return "", ErrSyntax
			}
			i = end
			buf = utf8.AppendRune(buf, r)
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRuneInString(d.s[i:])
			if r == utf8.RuneError && size == 1 {
				return "", ErrInvalidUTF8
			}
			buf = appendIf(buf, d.s[i:i+size])
			i += size
		default:
			buf = appendIf(buf, d.s[i:i+1])
			i++
		}
	}
	return "", ErrSyntax
}

// appendIf appends t to buf when buf is not nil.
func appendIf(buf []byte, t string) []byte {
	if buf == nil {
		return nil
	}
	return append(buf, t...)
}

// number scans a JSON number and parses it as float64.
func (d *valueDecoder) number() (any, error) {
	if f, end, ok := shortNumber(d.s, d.i); ok && !d.long {
		d.i = end // ExactNumber holds for it: d.inexact stays as it is
		return d.slabs.float(f), nil
	}
	end, ok := NumberEnd(d.s, d.i)
	if !ok {
		return nil, ErrSyntax
	}
	if exponentTooLong(d.s[d.i:end]) {
		return nil, ErrNumberExponent
	}
	f, err := strconv.ParseFloat(d.s[d.i:end], 64)
	if err != nil {
		// The grammar held (NumberEnd), so only the range is left: 1e400.
		return nil, ErrNumberRange
	}
	if !d.inexact && !ExactNumber(d.s[d.i:end]) {
		d.inexact = true
	}
	d.i = end
	return d.slabs.float(f), nil
}

// maxShortDigits is the most digits shortNumber reads: their value, below
// 10^15, is an integer a double holds exactly.
const maxShortDigits = 15

// pow10 holds the powers of ten up to 10^maxShortDigits, each exact in a
// double.
var pow10 = [maxShortDigits + 1]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// shortNumber reads the number at s[i] when it is written the common way:
// an optional minus, then digits with no leading zero (or one zero),
// optionally a point and digits, no exponent, at most maxShortDigits
// digits in all. Its value is the integer of its digits divided by a
// power of ten, both exact in a double, so the one division rounds as
// strconv.ParseFloat does, and ExactNumber accepts it. For anything else
// ok is false and the caller reads the number the long way (NumberEnd,
// ParseFloat), which also finds the faults.
func shortNumber(s string, i int) (f float64, end int, ok bool) {
	neg := i < len(s) && s[i] == '-'
	if neg {
		i++
	}
	var mant uint64
	digits, start := 0, i
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		if digits++; digits > maxShortDigits {
			return 0, 0, false
		}
		mant = mant*10 + uint64(s[i]-'0')
	}
	if digits == 0 || (digits > 1 && s[start] == '0') {
		return 0, 0, false
	}
	frac := 0
	if i < len(s) && s[i] == '.' {
		i++
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			if digits++; digits > maxShortDigits {
				return 0, 0, false
			}
			mant = mant*10 + uint64(s[i]-'0')
			frac++
		}
		if frac == 0 {
			return 0, 0, false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		return 0, 0, false
	}
	f = float64(mant) / pow10[frac]
	if neg {
		f = -f
	}
	return f, i, true
}
