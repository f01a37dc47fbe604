package schema

import (
	"encoding/json"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"pigeon/internal/jsontext"
)

type jsonType uint8

const (
	tNull jsonType = 1 << iota
	tBool
	tNumber
	tInteger
	tString
	tObject
	tArray
)

// fastSchema is the direct validator of the common subset. Its verdict
// (valid) and its errors (errs, reason.go) are gojsonschema's for every
// document (differential fuzz tests hold it to that): decoded to float64
// when every number is exact (jsontext.ExactNumber), else to json.Number,
// which it reads exactly where a double would not decide. Unlike
// gojsonschema, it compiles each pattern once, never per member, and
// finds repeated array items with a hash set.
type fastSchema struct {
	types     jsonType // 0: any
	props     map[string]*fastSchema
	propNames []string // sorted: the order errs reports properties in
	required  []string
	// byName is props in propNames' order, each with whether required
	// names it, and loose the required names props lacks: an object is
	// checked with one lookup per property, required or not.
	byName     []namedProp
	loose      []string
	patterns   []patternProp // sorted by pattern
	noExtra    bool          // additionalProperties: false
	extra      *fastSchema   // additionalProperties given as a schema
	enum       []any
	hasConst   bool
	konst      any
	pattern    *regexp.Regexp
	anchored   anchoredPattern // pattern without regexp, when it is that simple
	minLen     int
	maxLen     int
	min, max   float64
	minR, maxR *big.Rat // the bounds as written, for inexact data
	hasMin     bool
	hasMax     bool
	items      *fastSchema
	minItems   int
	maxItems   int
	hasMaxItem bool
	unique     bool
}

// patternProp is one member of patternProperties: the members whose names
// the pattern matches (anywhere in the name, as regexp.MatchString does)
// must match schema.
type patternProp struct {
	source   string
	re       *regexp.Regexp
	anchored anchoredPattern
	schema   *fastSchema
}

func (p *patternProp) match(name string) bool {
	if p.anchored != nil {
		return p.anchored.match(name)
	}
	return p.re.MatchString(name)
}

// compileFast returns nil when the schema uses anything outside the subset.
func compileFast(doc any) *fastSchema {
	m, ok := doc.(map[string]any)
	if !ok {
		return nil
	}
	s := &fastSchema{maxLen: -1}
	for k, v := range m {
		switch k {
		case "$schema", "$id", "id", "title", "description", "default", "examples", "$comment":
		case "type":
			t, ok := parseTypes(v)
			if !ok {
				return nil
			}
			s.types = t
		case "properties":
			pm, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			s.props = make(map[string]*fastSchema, len(pm))
			for name, sub := range pm {
				c := compileFast(sub)
				if c == nil {
					return nil
				}
				s.props[name] = c
				s.propNames = append(s.propNames, name)
			}
			slices.Sort(s.propNames)
		case "patternProperties":
			pm, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			for p, sub := range pm {
				re, err := regexp.Compile(p)
				if err != nil {
					return nil
				}
				c := compileFast(sub)
				if c == nil {
					return nil
				}
				anchored, _ := parseAnchoredPattern(p)
				s.patterns = append(s.patterns, patternProp{source: p, re: re, anchored: anchored, schema: c})
			}
			slices.SortFunc(s.patterns, func(a, b patternProp) int { return strings.Compare(a.source, b.source) })
		case "required":
			arr, ok := v.([]any)
			if !ok {
				return nil
			}
			for _, r := range arr {
				rs, ok := r.(string)
				if !ok {
					return nil
				}
				s.required = append(s.required, rs)
			}
		case "additionalProperties":
			switch x := v.(type) {
			case bool:
				s.noExtra = !x
			case map[string]any:
				if s.extra = compileFast(x); s.extra == nil {
					return nil
				}
			default:
				return nil
			}
		case "enum":
			arr, ok := v.([]any)
			if !ok || len(arr) == 0 {
				return nil
			}
			for _, e := range arr {
				c, ok := scalar(e)
				if !ok {
					return nil
				}
				s.enum = append(s.enum, c)
			}
		case "const":
			c, ok := scalar(v)
			if !ok {
				return nil
			}
			s.hasConst, s.konst = true, c
		case "pattern":
			p, ok := v.(string)
			if !ok {
				return nil
			}
			re, err := regexp.Compile(p)
			if err != nil {
				return nil
			}
			s.pattern = re
			s.anchored, _ = parseAnchoredPattern(p)
		case "minLength", "maxLength", "minItems", "maxItems":
			n, _, ok := schemaNumber(v)
			if !ok || n < 0 || n != math.Trunc(n) || n > 1<<31 {
				return nil
			}
			switch k {
			case "minLength":
				s.minLen = int(n)
			case "maxLength":
				s.maxLen = int(n)
			case "minItems":
				s.minItems = int(n)
			case "maxItems":
				s.maxItems, s.hasMaxItem = int(n), true
			}
		case "minimum", "maximum":
			n, r, ok := schemaNumber(v)
			if !ok {
				return nil
			}
			if k == "minimum" {
				s.min, s.minR, s.hasMin = n, r, true
			} else {
				s.max, s.maxR, s.hasMax = n, r, true
			}
		case "items":
			c := compileFast(v)
			if c == nil {
				return nil
			}
			s.items = c
		case "uniqueItems":
			b, ok := v.(bool)
			if !ok {
				return nil
			}
			s.unique = b
		default:
			return nil
		}
	}
	s.byName = make([]namedProp, len(s.propNames))
	for i, name := range s.propNames {
		s.byName[i] = namedProp{name: name, schema: s.props[name], required: slices.Contains(s.required, name)}
	}
	for _, r := range s.required {
		if s.props[r] == nil && !slices.Contains(s.loose, r) {
			s.loose = append(s.loose, r)
		}
	}
	return s
}

// namedProp is one member of properties.
type namedProp struct {
	name     string
	schema   *fastSchema
	required bool // required names it
}

// scalar returns an enum or const member the subset compares, numbers as
// doubles (as gojsonschema compares them).
func scalar(v any) (any, bool) {
	switch x := v.(type) {
	case nil, bool, float64, string:
		return v, true
	case json.Number:
		f, _, ok := schemaNumber(x)
		return f, ok
	}
	return nil, false
}

// schemaNumber reads a number of a schema decoded with or without
// UseNumber: its double and its value as written.
func schemaNumber(v any) (float64, *big.Rat, bool) {
	switch x := v.(type) {
	case float64:
		return x, new(big.Rat).SetFloat64(x), !math.IsInf(x, 0)
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		r, ok := new(big.Rat).SetString(string(x))
		return f, r, err == nil && ok
	}
	return 0, nil, false
}

// numberValue reads a number of the data: its double and, when that does
// not compare as the number does (jsontext.ExactNumber), its value.
func numberValue(v any) (f float64, r *big.Rat, ok bool) {
	switch x := v.(type) {
	case float64:
		return x, nil, true
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return 0, nil, false
		}
		if jsontext.ExactNumber(string(x)) {
			return f, nil, true
		}
		r, ok := new(big.Rat).SetString(string(x))
		return f, r, ok
	}
	return 0, nil, false
}

// above and below compare the data number v with maximum and minimum.
func (s *fastSchema) above(f float64, r *big.Rat) bool {
	if !s.hasMax {
		return false
	}
	if r != nil {
		return r.Cmp(s.maxR) > 0
	}
	return f > s.max
}

func (s *fastSchema) below(f float64, r *big.Rat) bool {
	if !s.hasMin {
		return false
	}
	if r != nil {
		return r.Cmp(s.minR) < 0
	}
	return f < s.min
}

func parseTypes(v any) (jsonType, bool) {
	one := func(s string) (jsonType, bool) {
		switch s {
		case "null":
			return tNull, true
		case "boolean":
			return tBool, true
		case "number":
			return tNumber | tInteger, true
		case "integer":
			return tInteger, true
		case "string":
			return tString, true
		case "object":
			return tObject, true
		case "array":
			return tArray, true
		}
		return 0, false
	}
	switch x := v.(type) {
	case string:
		return one(x)
	case []any:
		var t jsonType
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return 0, false
			}
			tt, ok := one(s)
			if !ok {
				return 0, false
			}
			t |= tt
		}
		return t, t != 0
	}
	return 0, false
}

func typeOf(v any) (jsonType, bool) {
	switch x := v.(type) {
	case nil:
		return tNull, true
	case bool:
		return tBool, true
	case float64, json.Number:
		f, r, ok := numberValue(x)
		switch {
		case !ok:
			return 0, false
		case r != nil && r.IsInt(), r == nil && f == math.Trunc(f) && !math.IsInf(f, 0):
			return tInteger, true
		}
		return tNumber, true
	case string:
		return tString, true
	case map[string]any, jsontext.Object:
		return tObject, true
	case []any:
		return tArray, true
	}
	return 0, false
}

func (s *fastSchema) valid(v any) bool {
	t, ok := typeOf(v)
	if !ok {
		return false
	}
	if s.types != 0 && s.types&t == 0 {
		return false
	}
	if !s.choiceValid(v) {
		return false
	}
	switch x := v.(type) {
	case string:
		return s.stringValid(x)
	case float64, json.Number:
		f, r, _ := numberValue(x)
		if s.below(f, r) || s.above(f, r) {
			return false
		}
	case map[string]any:
		if !s.noExtra && s.extra == nil && len(s.patterns) == 0 && len(s.byName) <= len(x)+len(s.required) {
			// Each property looked up once, whether required or not:
			// fewer lookups than walking x and looking each member up
			// in props, after the required ones.
			for _, r := range s.loose {
				if _, ok := x[r]; !ok {
					return false
				}
			}
			for i := range s.byName {
				p := &s.byName[i]
				if pv, ok := x[p.name]; !ok {
					if p.required {
						return false
					}
				} else if !p.schema.valid(pv) {
					return false
				}
			}
			return true
		}
		for _, r := range s.required {
			if _, ok := x[r]; !ok {
				return false
			}
		}
		if s.noExtra || s.extra != nil || len(s.patterns) > 0 {
			for k, pv := range x {
				if !s.memberValid(k, pv) {
					return false
				}
				if ps := s.props[k]; ps != nil && !ps.valid(pv) {
					return false
				}
			}
		} else {
			for k, pv := range x {
				if ps := s.props[k]; ps != nil && !ps.valid(pv) {
					return false
				}
			}
		}
	case jsontext.Object:
		return s.objectValid(x)
	case []any:
		if len(x) < s.minItems || (s.hasMaxItem && len(x) > s.maxItems) {
			return false
		}
		if s.items != nil {
			for _, e := range x {
				if !s.items.valid(e) {
					return false
				}
			}
		}
		if s.unique && repeats(x, func(int) bool { return false }) {
			return false
		}
	}
	return true
}

// objectValid is valid for an object in the flat form
// (jsontext.DecodeFlat), member by member as valid reads a map.
func (s *fastSchema) objectValid(x jsontext.Object) bool {
	if !s.noExtra && s.extra == nil && len(s.patterns) == 0 && len(s.byName) <= len(x)+len(s.required) {
		for _, r := range s.loose {
			if _, ok := x.Get(r); !ok {
				return false
			}
		}
		for i := range s.byName {
			p := &s.byName[i]
			if pv, ok := x.Get(p.name); !ok {
				if p.required {
					return false
				}
			} else if !p.schema.valid(pv) {
				return false
			}
		}
		return true
	}
	for _, r := range s.required {
		if _, ok := x.Get(r); !ok {
			return false
		}
	}
	extra := s.noExtra || s.extra != nil || len(s.patterns) > 0
	for i := range x {
		k, pv := x[i].Name, x[i].Value
		if extra && !s.memberValid(k, pv) {
			return false
		}
		if ps := s.props[k]; ps != nil && !ps.valid(pv) {
			return false
		}
	}
	return true
}

// choiceValid checks enum and const.
func (s *fastSchema) choiceValid(v any) bool {
	if s.enum != nil && !slices.ContainsFunc(s.enum, func(e any) bool { return scalarEqual(e, v) }) {
		return false
	}
	return !s.hasConst || scalarEqual(s.konst, v)
}

func (s *fastSchema) stringValid(x string) bool {
	return s.lengthOK(x)&(lenShort|lenLong) == 0 && s.matches(x)
}

const (
	lenShort = 1 << iota
	lenLong
)

// lengthOK reports lenShort and lenLong for a string below minLength or
// above maxLength, in characters.
func (s *fastSchema) lengthOK(x string) int {
	if s.minLen == 0 && s.maxLen < 0 {
		return 0
	}
	n, out := utf8.RuneCountInString(x), 0
	if n < s.minLen {
		out |= lenShort
	}
	if s.maxLen >= 0 && n > s.maxLen {
		out |= lenLong
	}
	return out
}

func (s *fastSchema) matches(x string) bool {
	if s.anchored != nil {
		return s.anchored.match(x)
	}
	return s.pattern == nil || s.pattern.MatchString(x)
}

// memberValid checks the member k: pv of an object against the schemas of
// the patterns k matches, or, when k matches none and is no property,
// against additionalProperties. properties is checked apart.
func (s *fastSchema) memberValid(k string, pv any) bool {
	_, matched := s.props[k]
	for i := range s.patterns {
		if p := &s.patterns[i]; p.match(k) {
			matched = true
			if !p.schema.valid(pv) {
				return false
			}
		}
	}
	if matched {
		return true
	}
	return !s.noExtra && (s.extra == nil || s.extra.valid(pv))
}

// repeats calls each with the index of every item of x equal to an
// earlier one, as gojsonschema compares them (their JSON texts with
// numbers read as doubles, objects' members sorted by name), until each
// returns false, and reports whether it found one. It hashes each item
// once, where comparing all pairs would take time square in their number.
func repeats(x []any, each func(i int) bool) bool {
	type key struct {
		kind byte
		s    string
		f    uint64
	}
	seen := make(map[key]struct{}, len(x))
	found := false
	for i, e := range x {
		var k key
		switch v := e.(type) {
		case nil:
			k.kind = 'n'
		case bool:
			k.kind = 'f'
			if v {
				k.kind = 't'
			}
		case float64, json.Number:
			// 0 and -0 are two texts to gojsonschema, as to the bits.
			f, _, _ := numberValue(v)
			k.kind, k.f = 'd', math.Float64bits(f)
		case string:
			k.kind, k.s = 's', v
		default:
			text, ok := jsonWithoutNumbers(jsontext.Tree(v))
			if !ok {
				continue
			}
			k.kind, k.s = 'j', text
		}
		if _, ok := seen[k]; ok {
			found = true
			if !each(i) {
				return true
			}
			continue
		}
		seen[k] = struct{}{}
	}
	return found
}

// jsonWithoutNumbers is v as JSON text with its numbers written as their
// doubles: gojsonschema's text of an item, by its own steps.
func jsonWithoutNumbers(v any) (string, bool) {
	text, err := json.Marshal(v)
	if err != nil {
		return "", false
	}
	var doubles any
	if json.Unmarshal(text, &doubles) != nil {
		return "", false
	}
	if text, err = json.Marshal(doubles); err != nil {
		return "", false
	}
	return string(text), true
}

// scalarEqual compares a, an enum or const member (scalar), with the data
// b: numbers as doubles, as gojsonschema compares them.
func scalarEqual(a, b any) bool {
	if n, ok := b.(json.Number); ok {
		f, _, ok := numberValue(n)
		if !ok {
			return false
		}
		b = f
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case float64:
		// gojsonschema compares JSON texts, in which 0 and -0 differ.
		y, ok := b.(float64)
		return ok && x == y && math.Signbit(x) == math.Signbit(y)
	case string:
		y, ok := b.(string)
		return ok && x == y
	}
	return false
}
