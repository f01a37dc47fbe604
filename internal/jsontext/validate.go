// Package jsontext checks, decodes and writes JSON text with the property
// the broker relies on: that every reader decodes it to one and the same
// value. Validate and Decode refuse the same texts; Canonical writes the
// RFC 8785 (JCS) form that signatures cover; the three read numbers and
// escapes with the same code (scan.go). AppendString writes strings as
// encoding/json does.
package jsontext

import (
	"strconv"
	"unicode/utf8"
)

// Kind says why a text was refused.
type Kind uint8

// Kinds of refusal.
const (
	// KindSyntax is text that is not JSON (RFC 8259).
	KindSyntax Kind = iota + 1
	// KindDuplicateKey is an object with two members of one name, compared
	// after unescaping ("a" and "\u0061" are the same name). Readers
	// disagree on which one wins, so such a text has no single meaning.
	KindDuplicateKey
	// KindInvalidUTF8 is a string holding bytes that are not UTF-8, or a
	// \u escape of a lone UTF-16 surrogate.
	KindInvalidUTF8
	// KindTooDeep is nesting beyond the limit given to Validate.
	KindTooDeep
)

// Error is the reason Validate refused a text. Its message names the
// offset and, for a duplicate, the path of the object, never a value.
type Error struct {
	Kind   Kind
	Offset int    // byte offset where the problem was found
	Path   string // JSON Pointer of the object with a duplicate member
	Depth  int    // the limit, for KindTooDeep
}

func (e *Error) Error() string {
	at := " at offset " + strconv.Itoa(e.Offset)
	switch e.Kind {
	case KindDuplicateKey:
		p := e.Path
		if p == "" {
			p = "/"
		}
		return "duplicate member name in the object at " + strconv.Quote(p) + at
	case KindInvalidUTF8:
		return "string is not valid UTF-8 (or holds a lone surrogate escape)" + at
	case KindTooDeep:
		return "nesting deeper than " + strconv.Itoa(e.Depth) + " levels" + at
	}
	return "malformed JSON" + at
}

// Validate reports whether b is exactly one JSON value, surrounded only by
// whitespace, with valid UTF-8 and no lone surrogate escapes in its
// strings, no object holding two members of one name, and no more than
// maxDepth nested objects and arrays. It allocates only for objects with
// many members and for names with escapes.
func Validate(b []byte, maxDepth int) error {
	v := validator{in: b, maxDepth: maxDepth}
	v.ws()
	if err := v.value(0); err != nil {
		return err
	}
	v.ws()
	if v.i != len(v.in) {
		return v.fail(KindSyntax)
	}
	return nil
}

// ValidateValue validates the one JSON value that starts at b[i] (after
// white space) as Validate validates a whole text, and returns the index
// just past it; what follows it is not read. A caller walking a larger
// text validates a member's value and finds its end in one pass.
func ValidateValue(b []byte, i, maxDepth int) (int, error) {
	v := validator{in: b, i: i, start: i, maxDepth: maxDepth}
	v.ws()
	if err := v.value(0); err != nil {
		return -1, err
	}
	return v.i, nil
}

type validator struct {
	in       []byte
	i        int
	start    int // where the scan began
	maxDepth int
	// path, when not nil, is where the scan is (its first maxPath levels),
	// rendered only for a duplicate's error; depth counts every level. A
	// scan runs without it, and a duplicate it finds is found again by a
	// scan with it (retrace), so the common case pays nothing for a path
	// it never names.
	path    *[maxPath]step
	depth   int
	scratch []byte
}

func (v *validator) fail(k Kind) *Error {
	e := &Error{Kind: k, Offset: v.i}
	if k == KindTooDeep {
		e.Depth = v.maxDepth
	}
	return e
}

func (v *validator) ws() { v.i = spaceEnd(v.in, v.i) }

func (v *validator) value(depth int) error {
	if v.i >= len(v.in) {
		return v.fail(KindSyntax)
	}
	switch c := v.in[v.i]; {
	case c == '{':
		return v.object(depth + 1)
	case c == '[':
		return v.array(depth + 1)
	case c == '"':
		_, _, err := v.str(false)
		return err
	case c == 't':
		return v.lit("true")
	case c == 'f':
		return v.lit("false")
	case c == 'n':
		return v.lit("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return v.number()
	}
	return v.fail(KindSyntax)
}

func (v *validator) lit(word string) error {
	if len(v.in)-v.i < len(word) || string(v.in[v.i:v.i+len(word)]) != word {
		return v.fail(KindSyntax)
	}
	v.i += len(word)
	return nil
}

// smallObject is how many member names an object keeps in a slice before
// it switches to a map.
const smallObject = 16

func (v *validator) object(depth int) error {
	if depth > v.maxDepth {
		return v.fail(KindTooDeep)
	}
	v.i++ // {
	v.ws()
	if v.i < len(v.in) && v.in[v.i] == '}' {
		v.i++
		return nil
	}
	var small [smallObject][]byte
	names := small[:0]
	var many map[string]struct{}
	for {
		v.ws()
		if v.i >= len(v.in) || v.in[v.i] != '"' {
			return v.fail(KindSyntax)
		}
		at := v.i
		raw, escaped, err := v.str(true)
		if err != nil {
			return err
		}
		name := raw
		if escaped {
			name = append([]byte(nil), v.scratch...)
		}
		dup := false
		if many != nil {
			_, dup = many[string(name)]
		} else {
			for _, n := range names {
				if string(n) == string(name) {
					dup = true
					break
				}
			}
		}
		if dup {
			return v.duplicate(at)
		}
		switch {
		case many != nil:
			many[string(name)] = struct{}{}
		case len(names) < smallObject:
			names = append(names, name)
		default:
			many = make(map[string]struct{}, 2*smallObject)
			for _, n := range names {
				many[string(n)] = struct{}{}
			}
			many[string(name)] = struct{}{}
		}
		v.ws()
		if v.i >= len(v.in) || v.in[v.i] != ':' {
			return v.fail(KindSyntax)
		}
		v.i++
		v.ws()
		v.push(step{name: name, index: -1})
		err = v.value(depth)
		v.pop()
		if err != nil {
			return err
		}
		v.ws()
		if v.i >= len(v.in) {
			return v.fail(KindSyntax)
		}
		switch v.in[v.i] {
		case ',':
			v.i++
		case '}':
			v.i++
			return nil
		default:
			return v.fail(KindSyntax)
		}
	}
}

func (v *validator) array(depth int) error {
	if depth > v.maxDepth {
		return v.fail(KindTooDeep)
	}
	v.i++ // [
	v.ws()
	if v.i < len(v.in) && v.in[v.i] == ']' {
		v.i++
		return nil
	}
	for n := 0; ; n++ {
		v.ws()
		v.push(step{index: n})
		err := v.value(depth)
		v.pop()
		if err != nil {
			return err
		}
		v.ws()
		if v.i >= len(v.in) {
			return v.fail(KindSyntax)
		}
		switch v.in[v.i] {
		case ',':
			v.i++
		case ']':
			v.i++
			return nil
		default:
			return v.fail(KindSyntax)
		}
	}
}

// step is one level of the path: a member name, or an array index when
// index >= 0.
type step struct {
	name  []byte
	index int
}

// maxPath is how many levels of the path an error names.
const maxPath = 32

func (v *validator) push(s step) {
	if v.path == nil {
		return
	}
	if v.depth < maxPath {
		v.path[v.depth] = s
	}
	v.depth++
}

func (v *validator) pop() {
	if v.path != nil {
		v.depth--
	}
}

// duplicate is the error for the duplicate member name at offset at. A
// scan that does not keep its path scans again from where it began,
// keeping it, to the same first refusal.
func (v *validator) duplicate(at int) *Error {
	if v.path != nil {
		return &Error{Kind: KindDuplicateKey, Offset: at, Path: v.pointer()}
	}
	w := validator{in: v.in, i: v.start, start: v.start, maxDepth: v.maxDepth, path: new([maxPath]step)}
	w.ws()
	if err, ok := w.value(0).(*Error); ok && err.Kind == KindDuplicateKey && err.Offset == at {
		return err
	}
	return &Error{Kind: KindDuplicateKey, Offset: at} // unreachable: the scans agree
}

// pointer renders the current path as a JSON Pointer (RFC 6901).
func (v *validator) pointer() string {
	var b []byte
	for _, s := range v.path[:min(v.depth, maxPath)] {
		b = append(b, '/')
		if s.index >= 0 {
			b = strconv.AppendInt(b, int64(s.index), 10)
			continue
		}
		p := s.name
		for i := 0; i < len(p); i++ {
			switch p[i] {
			case '~':
				b = append(b, '~', '0')
			case '/':
				b = append(b, '~', '1')
			default:
				b = append(b, p[i])
			}
		}
	}
	return string(b)
}

// str checks a string starting at its opening quote. It returns the raw
// text between the quotes (aliasing the input) and whether it held escapes;
// when it did and decode is set, v.scratch holds the decoded text.
func (v *validator) str(decode bool) ([]byte, bool, error) {
	v.i++ // "
	start := v.i
	escaped := false
	if decode {
		v.scratch = v.scratch[:0]
	}
	for v.i < len(v.in) {
		if !escaped || !decode {
			// Plain ASCII in a tight loop: most of every string is.
			v.i = PlainEnd(v.in, v.i)
			if v.i >= len(v.in) {
				break
			}
		}
		c := v.in[v.i]
		switch {
		case c == '"':
			raw := v.in[start:v.i]
			v.i++
			return raw, escaped, nil
		case c < 0x20:
			return nil, false, v.fail(KindSyntax)
		case c == '\\':
			if !escaped && decode {
				v.scratch = append(v.scratch, v.in[start:v.i]...)
			}
			escaped = true
			r, end, f := escape(v.in, v.i)
			if f != escapeOK {
				return nil, false, v.fail(f.kind())
			}
			v.i = end
			if decode {
				v.scratch = utf8.AppendRune(v.scratch, r)
			}
			continue
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(v.in[v.i:])
			if r == utf8.RuneError && size == 1 {
				return nil, false, v.fail(KindInvalidUTF8)
			}
			if escaped && decode {
				v.scratch = append(v.scratch, v.in[v.i:v.i+size]...)
			}
			v.i += size
			continue
		}
		if escaped && decode {
			v.scratch = append(v.scratch, c)
		}
		v.i++
	}
	return nil, false, v.fail(KindSyntax)
}

// plain marks the bytes a string scan passes over: ASCII, not a control
// character, a quote or a backslash.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func (v *validator) number() error {
	end, ok := NumberEnd(v.in, v.i)
	v.i = end
	if !ok {
		return v.fail(KindSyntax)
	}
	return nil
}
