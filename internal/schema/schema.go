// Package schema validates decoded JSON documents against a JSON schema:
// a direct validator for the common keywords, with gojsonschema as the
// reference for everything else and for the reasons it gives.
package schema

import (
	"bytes"
	"encoding/json"
	"iter"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/xeipuuv/gojsonschema"

	"pigeon/internal/jsontext"
)

// Schema is a JSON schema compiled once per subject version. Schemas that
// use only the common keywords (type, properties, required,
// additionalProperties: bool, enum and const of scalars, pattern,
// min/maxLength, minimum/maximum, items, min/maxItems, and annotations) are
// also compiled to a direct validator that needs no allocation; any other
// schema is validated by gojsonschema. Both agree on every document (a
// differential fuzz test holds them to it). Anchored patterns as simple as
// ^[A-Z]{3}$ are matched without the regexp engine (pattern.go). A Schema
// is safe for concurrent use.
type Schema struct {
	full *gojsonschema.Schema
	fast *fastSchema
	// names are the member names the schema declares (under properties
	// and required): the only ones a reason shows (schemaReason).
	names map[string]bool
	// choices are the numbers of the schema's enum and const values, by
	// the doubles gojsonschema compares them as (inexactChoice);
	// inexactChoices is set when one is a number a double does not hold
	// apart from its neighbours.
	choices        map[float64][]*big.Rat
	inexactChoices bool
}

// maxDepth is the nesting a schema may reach, as encoding/json allows.
const maxDepth = 10000

// Compile compiles the JSON schema raw. A schema with an object holding
// two members of one name, or a string that is not UTF-8, is refused: the
// validators would read the last member, a reviewer the first.
func Compile(raw []byte) (*Schema, error) {
	if err := jsontext.Validate(raw, maxDepth); err != nil {
		return nil, err
	}
	full, err := gojsonschema.NewSchema(gojsonschema.NewBytesLoader(raw))
	if err != nil {
		return nil, err
	}
	s := &Schema{full: full, names: map[string]bool{}, choices: map[float64][]*big.Rat{}}
	s.inexactChoices = choiceNumbers(raw, s.choices)
	var doc any
	if json.Unmarshal(raw, &doc) == nil {
		if !s.inexactChoices {
			s.fast = compileFast(doc) // it compares members as doubles
		}
		declaredNames(doc, s.names)
	}
	return s, nil
}

// choiceNumbers adds to choices the numbers of every enum and const value
// of the schema raw, at any depth, by their doubles, and reports whether
// one of them is a number a double does not hold apart from its
// neighbours (jsontext.ExactNumber).
func choiceNumbers(raw []byte, choices map[float64][]*big.Rat) (inexact bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc any
	if dec.Decode(&doc) != nil {
		return false
	}
	var walk func(v any, choice bool)
	walk = func(v any, choice bool) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(e, choice || k == "enum" || k == "const")
			}
		case []any:
			for _, e := range x {
				walk(e, choice)
			}
		case json.Number:
			if !choice {
				return
			}
			f, _ := strconv.ParseFloat(string(x), 64)
			r, ok := new(big.Rat).SetString(string(x))
			if !ok {
				return
			}
			choices[f] = append(choices[f], r)
			inexact = inexact || !jsontext.ExactNumber([]byte(x))
		}
	}
	walk(doc, false)
	return inexact
}

// declaredNames adds to names every member name the schema v declares:
// the keys of each properties object and the strings of each required
// array, at any depth.
func declaredNames(v any, names map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			switch p := e.(type) {
			case map[string]any:
				if k == "properties" {
					for n := range p {
						names[n] = true
					}
				}
			case []any:
				if k == "required" {
					for _, n := range p {
						if n, ok := n.(string); ok {
							names[n] = true
						}
					}
				}
			}
			declaredNames(e, names)
		}
	case []any:
		for _, e := range x {
			declaredNames(e, names)
		}
	}
}

// Validate returns "" when data is valid, else a reason naming the failing
// fields and rules, never their values. data is raw decoded; gojsonschema
// reads raw (it needs numbers as json.Number to check them).
//
// The direct validator judges data's numbers as doubles, which is only
// the judgement of raw, what the broker stores and receivers get, when
// every number in raw is one a double holds apart from its neighbours
// (exactNumbers); otherwise gojsonschema, which reads numbers exactly,
// decides: 100.0000000000000001 is above "maximum": 100 and no integer.
func (s *Schema) Validate(data any, raw []byte) string {
	return s.validate(data, raw, s.fast != nil && exactNumbers(raw), false)
}

// ValidateExact is Validate for raw whose numbers a decoder found exact
// (jsontext.Document.Exact): it does not scan raw for them again.
func (s *Schema) ValidateExact(data any, raw []byte) string {
	return s.validate(data, raw, s.fast != nil, true)
}

// validate judges data with the direct validator when fast is set, and
// otherwise, or for the reason of a refusal, with gojsonschema; exact says
// a decoder found every number of raw exact.
func (s *Schema) validate(data any, raw []byte, fast, exact bool) string {
	if fast {
		if s.fast.valid(data) {
			return ""
		}
		// Fall through for the detailed reason; refusals are rare.
	}
	res, err := s.full.Validate(gojsonschema.NewBytesLoader(raw))
	if err != nil {
		return "data could not be validated"
	}
	if res.Valid() {
		if fast {
			return "data does not match schema"
		}
		if (!exact || s.inexactChoices) && len(s.choices) > 0 && inexactChoice(raw, s.choices) {
			return "data does not match schema: a number beyond double precision equals an enum or const member only as a double"
		}
		return ""
	}
	return schemaReason(res.Errors(), s.names)
}

// inexactChoice reports whether the JSON text raw holds a number whose
// double is that of a member of choices but whose value is no member's:
// gojsonschema, which compares enum and const members as doubles, may have
// admitted it as that member (1.0000000000000000001 as 1, 9007199254740992
// as 9007199254740993), though receivers get its text.
func inexactChoice(raw []byte, choices map[float64][]*big.Rat) bool {
	for lit := range numbers(raw) {
		if lit == nil {
			return true // not a number: judged inexact
		}
		f, _ := strconv.ParseFloat(string(lit), 64)
		if members := choices[f]; len(members) > 0 {
			r, _ := new(big.Rat).SetString(string(lit))
			if r == nil || !slices.ContainsFunc(members, func(m *big.Rat) bool { return m.Cmp(r) == 0 }) {
				return true
			}
		}
	}
	return false
}

// numbers yields the number literals of the JSON text raw, in order,
// skipping strings; nil for one that is not a valid number, after which
// it stops.
func numbers(raw []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for i := 0; i < len(raw); i++ {
			switch c := raw[i]; {
			case c == '"':
				for i++; i < len(raw) && raw[i] != '"'; i++ {
					if raw[i] == '\\' {
						i++
					}
				}
			case c == '-' || c >= '0' && c <= '9':
				end, ok := jsontext.NumberEnd(raw, i)
				if !ok {
					yield(nil)
					return
				}
				if !yield(raw[i:end]) {
					return
				}
				i = end - 1
			}
		}
	}
}

// schemaReason names the failing fields and rules, never their values,
// and names fields by the schema's own names only: a member name the
// schema does not declare is data the publisher chose (a card number, an
// address), and reasons go into the audit log, which is never rewritten.
// Such a name is shown as *; array indices stay.
func schemaReason(errs []gojsonschema.ResultError, names map[string]bool) string {
	var b strings.Builder
	b.WriteString("data does not match schema: ")
	for i, e := range errs {
		if i == 5 {
			b.WriteString("; …")
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		writeField(&b, e.Field(), names)
		b.WriteString(": ")
		b.WriteString(e.Type())
	}
	return b.String()
}

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

// fastSchema is the direct validator of the common subset.
type fastSchema struct {
	types      jsonType // 0: any
	props      map[string]*fastSchema
	propNames  []string
	required   []string
	noExtra    bool
	enum       []any
	hasConst   bool
	konst      any
	pattern    *regexp.Regexp
	anchored   anchoredPattern // pattern without regexp, when it is that simple
	minLen     int
	maxLen     int
	min, max   float64
	hasMin     bool
	hasMax     bool
	items      *fastSchema
	minItems   int
	maxItems   int
	hasMaxItem bool
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
			b, ok := v.(bool)
			if !ok {
				return nil
			}
			s.noExtra = !b
		case "enum":
			arr, ok := v.([]any)
			if !ok || len(arr) == 0 {
				return nil
			}
			for _, e := range arr {
				if !scalar(e) {
					return nil
				}
			}
			s.enum = arr
		case "const":
			if !scalar(v) {
				return nil
			}
			s.hasConst, s.konst = true, v
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
			n, ok := v.(float64)
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
			n, ok := v.(float64)
			if !ok {
				return nil
			}
			if k == "minimum" {
				s.min, s.hasMin = n, true
			} else {
				s.max, s.hasMax = n, true
			}
		case "items":
			c := compileFast(v)
			if c == nil {
				return nil
			}
			s.items = c
		default:
			return nil
		}
	}
	return s
}

func scalar(v any) bool {
	switch v.(type) {
	case nil, bool, float64, string:
		return true
	}
	return false
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
	case float64:
		if x == math.Trunc(x) && !math.IsInf(x, 0) {
			return tInteger, true
		}
		return tNumber, true
	case string:
		return tString, true
	case map[string]any:
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
	if s.enum != nil {
		hit := false
		for _, e := range s.enum {
			if scalarEqual(e, v) {
				hit = true
				break
			}
		}
		if !hit {
			return false
		}
	}
	if s.hasConst && !scalarEqual(s.konst, v) {
		return false
	}
	switch x := v.(type) {
	case string:
		if s.minLen > 0 || s.maxLen >= 0 {
			n := utf8.RuneCountInString(x)
			if n < s.minLen || (s.maxLen >= 0 && n > s.maxLen) {
				return false
			}
		}
		if s.anchored != nil {
			if !s.anchored.match(x) {
				return false
			}
		} else if s.pattern != nil && !s.pattern.MatchString(x) {
			return false
		}
	case float64:
		if (s.hasMin && x < s.min) || (s.hasMax && x > s.max) {
			return false
		}
	case map[string]any:
		for _, r := range s.required {
			if _, ok := x[r]; !ok {
				return false
			}
		}
		if s.noExtra {
			for k := range x {
				if _, ok := s.props[k]; !ok {
					return false
				}
			}
		}
		if len(s.props) < len(x) {
			for _, name := range s.propNames {
				if pv, ok := x[name]; ok && !s.props[name].valid(pv) {
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
	}
	return true
}

func scalarEqual(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case float64:
		y, ok := b.(float64)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	}
	return false
}

// exactNumbers reports whether every number in the JSON text raw has at
// most 15 significant digits and a magnitude a double holds without
// underflow (or is zero): such decimals round to distinct doubles, in
// order, and a fraction never rounds to an integer, so comparing their
// doubles answers as comparing the decimals would. Strings are skipped.
func exactNumbers(raw []byte) bool {
	for lit := range numbers(raw) {
		if lit == nil || !jsontext.ExactNumber(lit) {
			return false
		}
	}
	return true
}

// writeField writes field, a path as gojsonschema writes it ("(root)",
// "items.1.qty"), with each segment that is neither a declared name nor
// an array index replaced by *.
func writeField(b *strings.Builder, field string, names map[string]bool) {
	if field == "(root)" || names[field] {
		b.WriteString(field)
		return
	}
	for i, seg := range strings.Split(field, ".") {
		if i > 0 {
			b.WriteByte('.')
		}
		if names[seg] || isIndex(seg) {
			b.WriteString(seg)
		} else {
			b.WriteByte('*')
		}
	}
}

// isIndex reports whether seg is an array index: up to 9 decimal digits,
// too few for a card number or any identifier worth hiding.
func isIndex(seg string) bool {
	if seg == "" || len(seg) > 9 {
		return false
	}
	for i := 0; i < len(seg); i++ {
		if seg[i] < '0' || seg[i] > '9' {
			return false
		}
	}
	return true
}
