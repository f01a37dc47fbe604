// Package datapath walks dot paths such as "card.pan" into decoded JSON
// data (map[string]any, []any and scalars, with objects as
// jsontext.Object in the flat form that jsontext.DecodeFlat gives, which
// Lookup, Find and FindIn read as they read a map). A Path is parsed once and has
// two match modes: Lookup follows the path exactly, the way an idempotency
// key is read; Find and Set match widely, ignoring case and reaching into
// arrays, the way forbidden, tokenized and redacted fields are matched.
// The walks do not allocate.
package datapath

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"pigeon/internal/jsontext"
)

// Path is a dot path into data, split and compiled once. The zero Path is
// the empty path.
type Path struct {
	text string
	segs []seg
}

// seg is one segment of a Path.
type seg struct {
	name string
	// index is the array index name spells, or -1.
	index int
	// sameLen holds when every member name that folds to name has
	// len(name) bytes, so a name of another length is skipped without
	// folding: name is ASCII without k or s, the only ASCII letters whose
	// case-fold orbits hold a multi-byte rune (U+212A KELVIN SIGN, U+017F
	// LATIN SMALL LETTER LONG S).
	sameLen bool
	// fold is name's bit in a Names, or 0 when name is not ASCII.
	fold uint64
}

// Parse splits p at its dots. It accepts any string; WellFormed says
// whether a policy should.
func Parse(p string) Path {
	parts := strings.Split(p, ".")
	f := Path{text: p, segs: make([]seg, len(parts))}
	for i, name := range parts {
		s := seg{name: name, index: -1, sameLen: true}
		s.fold, _ = foldBitOf(name)
		if n, err := strconv.Atoi(name); err == nil && n >= 0 {
			s.index = n
		}
		for j := 0; j < len(name); j++ {
			if c := name[j] | 0x20; name[j] >= utf8.RuneSelf || c == 'k' || c == 's' {
				s.sameLen = false
				break
			}
		}
		f.segs[i] = s
	}
	return f
}

// WellFormed reports whether p is a path a policy may name: dot-separated,
// non-empty segments without whitespace, brackets or wildcards.
func WellFormed(p string) bool {
	for s := range strings.SplitSeq(p, ".") {
		if s == "" || strings.ContainsAny(s, " \t\n\f\r[]*") {
			return false
		}
	}
	return true
}

// String returns the path as written.
func (p *Path) String() string { return p.text }

// Lookup walks p into data exactly: objects by member name, case included,
// arrays by index. It reports whether the path leads to a value.
func (p *Path) Lookup(data any) (any, bool) {
	cur := data
	for i := range p.segs {
		s := &p.segs[i]
		switch x := cur.(type) {
		case map[string]any:
			v, ok := x[s.name]
			if !ok {
				return nil, false
			}
			cur = v
		case jsontext.Object:
			v, ok := x.Get(s.name)
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			if s.index < 0 || s.index >= len(x) {
				return nil, false
			}
			cur = x[s.index]
		default:
			return nil, false
		}
	}
	return cur, true
}

// matches reports whether the object member name k is the segment's name,
// ignoring case (Unicode simple folding, as strings.EqualFold).
func (s *seg) matches(k string) bool {
	return (len(k) == len(s.name) || !s.sameLen) && (k == s.name || strings.EqualFold(k, s.name))
}

// Find calls fn with every value p matches in data, until fn returns true,
// and reports whether it did. A segment names an object's members ignoring
// case, so it matches every member whose name folds to it ("pan", "PAN"
// and "Pan" alike). Applied to an array, a segment that is an array index
// picks that element; any other segment applies to every element, through
// nested arrays too, so card.pan matches {"card":[{"pan":1},{"x":2}]}.
// Strings, numbers, booleans and null match no further segment.
func (p *Path) Find(data any, fn func(v any) bool) bool {
	return find(data, p.segs, fn)
}

// FindIn is Find, given top, the summary of data's member names when data
// is an object (nil, or a zero Names, when nothing is known).
// It answers as Find does; with top, it skips walking data's members when
// no member's name can fold to the path's first segment, or when exactly
// one can and that one is spelled as the segment is.
func (p *Path) FindIn(data any, top *Names, fn func(v any) bool) bool {
	if len(p.segs) == 0 || top == nil {
		return find(data, p.segs, fn)
	}
	s := &p.segs[0]
	if s.fold == 0 {
		return find(data, p.segs, fn)
	}
	switch x := data.(type) {
	case map[string]any:
		if top.absent(s.fold) {
			return false
		}
		if top.single(s.fold) {
			if v, ok := x[s.name]; ok {
				return find(v, p.segs[1:], fn)
			}
		}
	case jsontext.Object:
		if top.absent(s.fold) {
			return false
		}
		if top.single(s.fold) {
			if v, ok := x.Get(s.name); ok {
				return find(v, p.segs[1:], fn)
			}
		}
	}
	return find(data, p.segs, fn)
}

func find(cur any, segs []seg, fn func(v any) bool) bool {
	if len(segs) == 0 {
		return fn(cur)
	}
	s := &segs[0]
	switch x := cur.(type) {
	case map[string]any:
		for k, v := range x {
			if s.matches(k) && find(v, segs[1:], fn) {
				return true
			}
		}
	case jsontext.Object:
		for i := range x {
			if s.matches(x[i].Name) && find(x[i].Value, segs[1:], fn) {
				return true
			}
		}
	case []any:
		if s.index >= 0 {
			return s.index < len(x) && find(x[s.index], segs[1:], fn)
		}
		for _, v := range x {
			if find(v, segs, fn) {
				return true
			}
		}
	}
	return false
}

// Set sets every value p matches in data (as Find matches) to val, in
// place. data is a tree: it holds no jsontext.Object.
func (p *Path) Set(data any, val any) {
	if len(p.segs) > 0 {
		set(data, p.segs, val)
	}
}

func set(cur any, segs []seg, val any) {
	s, last := &segs[0], len(segs) == 1
	switch x := cur.(type) {
	case map[string]any:
		for k, v := range x {
			switch {
			case !s.matches(k):
			case last:
				x[k] = val
			default:
				set(v, segs[1:], val)
			}
		}
	case []any:
		if s.index >= 0 {
			switch {
			case s.index >= len(x):
			case last:
				x[s.index] = val
			default:
				set(x[s.index], segs[1:], val)
			}
			return
		}
		for _, v := range x {
			set(v, segs, val)
		}
	}
}
