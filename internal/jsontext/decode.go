package jsontext

import (
	"errors"
	"strconv"
	"unicode/utf8"
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
	d := valueDecoder{s: string(b), maxDepth: maxDepth}
	d.slabs.hint = len(b) / 24
	d.skip()
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.skip()
	if d.i != len(d.s) {
		return nil, ErrSyntax
	}
	return v, nil
}

// Refusals of Decode.
var (
	ErrSyntax       = errors.New("pigeon: malformed JSON")
	ErrDuplicateKey = errors.New("pigeon: duplicate member name")
	ErrInvalidUTF8  = errors.New("pigeon: invalid UTF-8 or lone surrogate")
	ErrTooDeep      = errors.New("pigeon: nesting too deep")
)

type valueDecoder struct {
	s        string
	i        int
	maxDepth int
	slabs    slabs
}

func (d *valueDecoder) skip() { d.i = spaceEnd(d.s, d.i) }

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
	m := make(map[string]any, memberHint(d.s, d.i))
	d.skip()
	if d.i < len(d.s) && d.s[d.i] == '}' {
		d.i++
		return m, nil
	}
	for {
		d.skip()
		if d.i >= len(d.s) || d.s[d.i] != '"' {
			return nil, ErrSyntax
		}
		k, err := d.str()
		if err != nil {
			return nil, err
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
		n := len(m)
		m[k] = v
		if len(m) == n {
			return nil, ErrDuplicateKey
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
			return m, nil
		default:
			return nil, ErrSyntax
		}
	}
}

func (d *valueDecoder) array(depth int) (any, error) {
	if depth > d.maxDepth {
		return nil, ErrTooDeep
	}
	d.i++ // [
	a := []any{}
	d.skip()
	if d.i < len(d.s) && d.s[d.i] == ']' {
		d.i++
		return a, nil
	}
	for {
		d.skip()
		v, err := d.value(depth)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		d.skip()
		if d.i >= len(d.s) {
			return nil, ErrSyntax
		}
		switch d.s[d.i] {
		case ',':
			d.i++
		case ']':
			d.i++
			return a, nil
		default:
			return nil, ErrSyntax
		}
	}
}

// str decodes a string starting at the opening quote.
func (d *valueDecoder) str() (string, error) {
	start := d.i + 1
	i := PlainEnd(d.s, start)
	for i < len(d.s) {
		c := d.s[i]
		switch {
		case c == '"':
			d.i = i + 1
			return d.s[start:i], nil
		case c == '\\':
			return d.strSlow(start)
		case c < 0x20:
			return "", ErrSyntax
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRuneInString(d.s[i:])
			if r == utf8.RuneError && size == 1 {
				return "", ErrInvalidUTF8
			}
			i += size
		default:
			i++
		}
	}
	return "", ErrSyntax
}

// strSlow decodes a string with escapes, as encoding/json does, but
// refuses invalid UTF-8 and lone surrogates, which it would replace.
func (d *valueDecoder) strSlow(start int) (string, error) {
	buf := make([]byte, 0, 32)
	i := start
	for i < len(d.s) {
		c := d.s[i]
		switch {
		case c == '"':
			d.i = i + 1
			return string(buf), nil
		case c < 0x20:
			return "", ErrSyntax
		case c == '\\':
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
			buf = append(buf, d.s[i:i+size]...)
			i += size
		default:
			buf = append(buf, c)
			i++
		}
	}
	return "", ErrSyntax
}

// number scans a JSON number and parses it as float64.
func (d *valueDecoder) number() (any, error) {
	end, ok := NumberEnd(d.s, d.i)
	if !ok {
		return nil, ErrSyntax
	}
	f, err := strconv.ParseFloat(d.s[d.i:end], 64)
	if err != nil {
		return nil, ErrSyntax
	}
	d.i = end
	return d.slabs.float(f), nil
}

// memberHint estimates how many members the object whose text starts at s[i]
// (just after its brace) has, by counting the commas at its own level, so
// that its map is allocated once at its size. It reads at most 4 KiB: a
// larger object grows its map as it fills.
func memberHint(s string, i int) int {
	n, depth := 1, 0
	for end := min(len(s), i+4096); i < end; i++ {
		switch s[i] {
		case '"':
			for i++; i < end && s[i] != '"'; i++ {
				if s[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return n
			}
			depth--
		case ',':
			if depth == 0 {
				n++
			}
		}
	}
	return n
}
