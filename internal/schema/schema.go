// Package schema validates decoded JSON documents against a JSON schema:
// a direct validator for the common keywords, which gives gojsonschema's
// verdicts and reasons at a cost linear in the data, with gojsonschema as
// the reference for everything else.
package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/xeipuuv/gojsonschema"

	"pigeon/internal/jsontext"
)

// Schema is a JSON schema compiled once per subject version. Schemas that
// use only the common keywords (type, properties, patternProperties,
// required, additionalProperties as a bool or a schema, enum and const of
// scalars, pattern, min/maxLength, minimum/maximum, items, min/maxItems,
// uniqueItems, and annotations) are also compiled to a direct validator,
// which needs no allocation to admit most documents and gives the reason
// of a refusal itself (reason.go); any other schema is validated by
// gojsonschema. Both agree on every verdict and every reason's errors
// (differential fuzz tests hold them to it). The direct validator compiles
// each pattern once (gojsonschema compiles each patternProperties pattern
// for each member of each message) and matches anchored patterns as
// simple as ^[A-Z]{3}$ without the regexp engine (pattern.go). A Schema
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

// ErrValidatorFailed is the error of a schema, or of data, on which
// gojsonschema panicked: it dereferences the exact value of a number it
// cannot read (math/big refuses an exponent such as that of
// 0e10000000000000000000), and a broker must not stop for one document.
var ErrValidatorFailed = errors.New("pigeon: the schema validator failed on the document")

// guarded runs f, a call into gojsonschema, and turns a panic of it into
// ErrValidatorFailed.
func guarded[T any](f func() (T, error)) (v T, err error) {
	defer func() {
		if r := recover(); r != nil {
			var zero T
			v, err = zero, fmt.Errorf("%w: %v", ErrValidatorFailed, r)
		}
	}()
	return f()
}

// Compile compiles the JSON schema raw. A schema with an object holding
// two members of one name, or a string that is not UTF-8, is refused: the
// validators would read the last member, a reviewer the first. So is a
// schema whose $ref recursion would let one small message cost time
// exponential in its nesting, or endless time (ErrRecursion,
// checkRecursion).
func Compile(raw []byte) (*Schema, error) {
	if err := jsontext.Validate(raw, maxDepth); err != nil {
		return nil, err
	}
	full, err := guarded(func() (*gojsonschema.Schema, error) { return gojsonschema.NewSchema(gojsonschema.NewBytesLoader(raw)) })
	if err != nil {
		return nil, err
	}
	s := &Schema{full: full, names: map[string]bool{}, choices: map[float64][]*big.Rat{}}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc any
	if dec.Decode(&doc) == nil {
		if err := checkRecursion(doc); err != nil {
			return nil, err
		}
		var inexactBounds bool
		s.inexactChoices, inexactBounds = choiceNumbers(doc, s.choices)
		if !s.inexactChoices && !inexactBounds {
			s.fast = compileFast(doc) // it compares members and bounds as doubles
		}
		declaredNames(doc, s.names)
	}
	return s, nil
}

// choiceNumbers adds to choices the numbers of every enum and const value
// of the schema doc (decoded with UseNumber), at any depth, by their
// doubles, and reports whether one of them is a number a double does not
// hold apart from its neighbours (jsontext.ExactNumber), and whether a
// minimum or maximum is one: gojsonschema compares bounds exactly.
func choiceNumbers(doc any, choices map[float64][]*big.Rat) (inexact, inexactBound bool) {
	var walk func(v any, choice bool)
	walk = func(v any, choice bool) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if n, ok := e.(json.Number); ok && (k == "minimum" || k == "maximum") && !jsontext.ExactNumber([]byte(n)) {
					inexactBound = true
				}
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
	return inexact, inexactBound
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
// fields and rules, never their values. data is raw decoded, as a tree or
// in the flat form (jsontext.DecodeFlat), which gets the same answer;
// gojsonschema reads raw (it needs numbers as json.Number to check them).
//
// The direct validator judges data's numbers as doubles, which is only
// the judgement of raw, what the broker stores and receivers get, when
// every number in raw is one a double holds apart from its neighbours
// (exactNumbers); otherwise it judges raw decoded again with its numbers
// as written (json.Number), which it reads exactly where their doubles
// would not decide: 100.0000000000000001 is above "maximum": 100 and no
// integer. One such number must not send a message to gojsonschema,
// whose cost a sender could then choose (patternProperties compiles each
// pattern for each member).
func (s *Schema) Validate(data any, raw []byte) string {
	if s.fast == nil || exactNumbers(raw) {
		return s.validate(data, raw, s.fast != nil, false)
	}
	v, ok := numberData(raw)
	if !ok {
		return s.validate(data, raw, false, false)
	}
	if !s.fast.valid(v) {
		return s.fast.reason(v, s.names)
	}
	if len(s.choices) > 0 && inexactChoice(raw, s.choices) {
		return inexactChoiceReason
	}
	return ""
}

// inexactChoiceReason refuses a number gojsonschema and the direct
// validator admit as an enum or const member by its double only.
const inexactChoiceReason = "data does not match schema: a number beyond double precision equals an enum or const member only as a double"

// numberData decodes the JSON text raw with its numbers as json.Number,
// as gojsonschema does; false when raw is no JSON text or has a number
// beyond the range of a double.
func numberData(raw []byte) (any, bool) {
	for lit := range numbers(raw) {
		if lit == nil {
			return nil, false
		}
		if !jsontext.ExactNumber(lit) {
			if _, err := strconv.ParseFloat(string(lit), 64); err != nil {
				return nil, false
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil || dec.More() {
		return nil, false
	}
	return v, true
}

// ValidateExact is Validate for raw whose numbers a decoder found exact
// (jsontext.Document.Exact): it does not scan raw for them again.
func (s *Schema) ValidateExact(data any, raw []byte) string {
	return s.validate(data, raw, s.fast != nil, true)
}

// validate judges data, and gives the reason of a refusal, with the
// direct validator when fast is set, and otherwise with gojsonschema;
// exact says a decoder found every number of raw exact.
func (s *Schema) validate(data any, raw []byte, fast, exact bool) string {
	if fast {
		if s.fast.valid(data) {
			return ""
		}
		// A sender can make every message a refusal: its reason is the
		// direct validator's too, not gojsonschema's for the price of a
		// second validation. It reads a tree.
		return s.fast.reason(jsontext.Tree(data), s.names)
	}
	res, err := guarded(func() (*gojsonschema.Result, error) { return s.full.Validate(gojsonschema.NewBytesLoader(raw)) })
	if err != nil {
		return "data could not be validated"
	}
	if res.Valid() {
		if (!exact || s.inexactChoices) && len(s.choices) > 0 && inexactChoice(raw, s.choices) {
			return inexactChoiceReason
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
	r := newReasonText(names)
	for _, e := range errs {
		if !r.add(e.Field(), e.Type()) {
			break
		}
	}
	return r.b.String()
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
