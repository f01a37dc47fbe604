package jsontext

import (
	"maps"
	"slices"
)

// Object is an object of a flat document (DecodeFlat): its members in
// document order, no two of one name.
type Object []Member

// Member is one member of an Object: its name, unescaped, and its value,
// in the flat form.
type Member struct {
	Name  string
	Value any
}

// Get returns the value of the member named name, and whether o has one.
func (o Object) Get(name string) (any, bool) {
	for i := range o {
		if o[i].Name == name {
			return o[i].Value, true
		}
	}
	return nil, false
}

// emptyObject is the flat form of {}: it holds nothing to share.
var emptyObject any = Object{}

// DecodeFlat is DecodeDocument with the value in the flat form: each
// object of at most 16 members is an Object rather than a
// map[string]any, which costs a small document a few allocations in all
// instead of a hash table per object; a larger object is a map, as
// DecodeDocument makes it, whose values are in the flat form too. It
// decodes what DecodeDocument decodes, refuses what it refuses with the
// same error, and gives the same Text, Exact and names; Tree makes its
// value the one DecodeDocument returns.
//
// The value's objects, strings and numbers are kept in ar's memory when
// ar is not nil (Arena), in memory of their own otherwise.
func DecodeFlat(b []byte, maxDepth int, top NameSink, ar *Arena) (Document, error) {
	d := valueDecoder{s: string(b), maxDepth: maxDepth, top: top, flat: true}
	if ar == nil {
		return decodeWith(&d)
	}
	d.slabs = ar.slabs
	if cap(d.slabs.strs)-len(d.slabs.strs) < len(b)/24 {
		d.slabs.strs = nil // a chunk of the size decodeWith picks
	}
	doc, err := decodeWith(&d)
	ar.slabs = d.slabs
	return doc, err
}

// Arena is memory for the values of flat documents (DecodeFlat) that is
// used again once they are gone, so that decoding one document after
// another in it costs no allocation but the copy of the text. Its owner
// says when the values are gone: Reuse when every value of the
// documents decoded in it since is, ReuseObjects when only their
// Objects are and their strings and numbers may live on (in a Tree of a
// document). Until then, documents decoded in it take memory after the
// last one's. The zero Arena is empty; an Arena is not safe for
// concurrent use.
type Arena struct{ slabs slabs }

// Reuse takes back all of ar's memory: no value of a document decoded in
// it may be read after.
func (ar *Arena) Reuse() {
	s := &ar.slabs
	clear(s.strs)
	clear(s.floats)
	s.strs, s.floats = s.strs[:0], s.floats[:0]
	ar.ReuseObjects()
}

// ReuseObjects takes back the memory of the Objects of the documents
// decoded in ar: no Object of them may be read after. Their strings and
// numbers are left where they are, for whatever holds them, and ar
// takes new memory for the next document's.
func (ar *Arena) ReuseObjects() {
	s := &ar.slabs
	if len(s.strs) > 0 || len(s.floats) > 0 {
		s.strs, s.floats = nil, nil
	}
	clear(s.members)
	clear(s.objects)
	s.members, s.objects = s.members[:0], s.objects[:0]
}

// Tree returns the value v, in the flat form (DecodeFlat), as Decode
// returns it: every Object made a map[string]any. v is not changed: an
// array or map of v that holds an Object is copied, and a value without
// an Object is returned as it is.
func Tree(v any) any {
	t, _ := tree(v)
	return t
}

// tree is Tree, and reports whether v held an Object.
func tree(v any) (any, bool) {
	switch x := v.(type) {
	case Object:
		m := make(map[string]any, len(x))
		for _, o := range x {
			m[o.Name], _ = tree(o.Value)
		}
		return m, true
	case []any:
		var out []any
		for i, e := range x {
			if t, ok := tree(e); ok {
				if out == nil {
					out = slices.Clone(x)
				}
				out[i] = t
			}
		}
		if out == nil {
			return x, false
		}
		return out, true
	case map[string]any:
		var out map[string]any
		for k, e := range x {
			if t, ok := tree(e); ok {
				if out == nil {
					out = maps.Clone(x)
				}
				out[k] = t
			}
		}
		if out == nil {
			return x, false
		}
		return out, true
	}
	return v, false
}
