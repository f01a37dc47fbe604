package jsontext

import (
	"bytes"
	"encoding"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// CaseVariant finds, in the JSON text b, a member name that encoding/json
// would decode into a field of a value of type t although it is not
// spelled as that field's name. encoding/json matches member names to
// fields without regard to case ("Data" fills the field named "data"), and
// the readers of JavaScript, Python or serde do not, so such a text means
// one thing to a Go reader and another to the rest: Pigeon refuses it.
// It returns the JSON Pointer of the member and the field's name, or ok
// false when there is none. It looks into the members that decode into
// structs (through pointers, slices, arrays and map values), not into
// values kept as text (json.RawMessage), interfaces, or types that decode
// themselves. b must be text Validate accepted; the first variant found
// in document order is reported.
func CaseVariant(b []byte, t reflect.Type) (path, field string, ok bool) {
	return caseVariant(b, t, "")
}

func caseVariant(b []byte, t reflect.Type, at string) (string, string, bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if decodesItself(t) {
		return "", "", false
	}
	switch t.Kind() {
	case reflect.Struct:
		return structVariant(b, t, at)
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return "", "", false // []byte: a base64 string
		}
		var elems []json.RawMessage
		if json.Unmarshal(b, &elems) != nil {
			return "", "", false
		}
		for i, e := range elems {
			if p, f, ok := caseVariant(e, t.Elem(), at+"/"+strconv.Itoa(i)); ok {
				return p, f, true
			}
		}
	case reflect.Map:
		members, ok := objectMembers(b)
		if !ok {
			return "", "", false
		}
		for _, m := range members {
			if p, f, ok := caseVariant(m.v, t.Elem(), at+"/"+pointerToken(m.k)); ok {
				return p, f, true
			}
		}
	}
	return "", "", false
}

func structVariant(b []byte, t reflect.Type, at string) (string, string, bool) {
	members, ok := objectMembers(b)
	if !ok {
		return "", "", false
	}
	fields := fieldsOf(t)
	for _, m := range members {
		f, exact := fields.match(m.k)
		if f == nil {
			continue
		}
		p := at + "/" + pointerToken(m.k)
		if !exact {
			return p, f.name, true
		}
		if p, name, ok := caseVariant(m.v, f.typ, p); ok {
			return p, name, true
		}
	}
	return "", "", false
}

// rawMember is a member of an object, its value as text.
type rawMember struct {
	k string
	v json.RawMessage
}

// objectMembers reads the members of the JSON object b, in order; false
// when b is not an object.
func objectMembers(b []byte) ([]rawMember, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	var out []rawMember
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		out = append(out, rawMember{k, v})
	}
	return out, true
}

var pointerEscapes = strings.NewReplacer("~", "~0", "/", "~1")

// pointerToken escapes a member name for a JSON Pointer (RFC 6901).
func pointerToken(k string) string { return pointerEscapes.Replace(k) }

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// decodesItself reports whether encoding/json hands values of t to t's own
// UnmarshalJSON or UnmarshalText.
func decodesItself(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t.Implements(unmarshalerType) || p.Implements(unmarshalerType) ||
		t.Implements(textUnmarshalerType) || p.Implements(textUnmarshalerType)
}

// structField is a field encoding/json decodes a member into.
type structField struct {
	name string
	typ  reflect.Type
}

type structFields []structField

// match returns the field a member named k decodes into, as encoding/json
// matches it (an exact name first, else one equal without regard to
// case), and whether k is spelled exactly as its name.
func (fs structFields) match(k string) (*structField, bool) {
	for i := range fs {
		if fs[i].name == k {
			return &fs[i], true
		}
	}
	for i := range fs {
		if strings.EqualFold(fs[i].name, k) {
			return &fs[i], false
		}
	}
	return nil, false
}

var fieldCache sync.Map // reflect.Type → structFields

// fieldsOf lists the fields encoding/json decodes members of t into: its
// exported fields by their JSON names, then those of embedded structs
// without a name of their own that no shallower field's name hides, as
// encoding/json lets the shallower field win. (Where embedded fields of
// one depth collide, encoding/json's rules pick one or none; any of them
// serves to find a variant.)
func fieldsOf(t reflect.Type) structFields {
	if fs, ok := fieldCache.Load(t); ok {
		return fs.(structFields)
	}
	var fs structFields
	var embedded []reflect.Type
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := sf.Type
		if sf.Anonymous && name == "" {
			et := ft
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				embedded = append(embedded, et)
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		fs = append(fs, structField{name: name, typ: ft})
	}
	own := len(fs)
	for _, et := range embedded {
		for _, f := range fieldsOf(et) {
			if !slices.ContainsFunc(fs[:own], func(o structField) bool { return o.name == f.name }) {
				fs = append(fs, f)
			}
		}
	}
	fieldCache.Store(t, fs)
	return fs
}
