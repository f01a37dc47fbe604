package schema

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// reasonErrors is how many errors a reason names before it ends in "; …".
const reasonErrors = 5

// reasonText writes a reason from errors given one at a time, each by its
// field as gojsonschema writes it and its type.
type reasonText struct {
	b     strings.Builder
	n     int
	names map[string]bool
}

func newReasonText(names map[string]bool) *reasonText {
	r := &reasonText{names: names}
	r.b.WriteString("data does not match schema: ")
	return r
}

// add writes one error and reports whether the reason wants another.
func (r *reasonText) add(field, typ string) bool {
	if r.n == reasonErrors {
		r.b.WriteString("; …")
		r.n++
		return false
	}
	if r.n > 0 {
		r.b.WriteString("; ")
	}
	writeField(&r.b, field, r.names)
	r.b.WriteString(": ")
	r.b.WriteString(typ)
	r.n++
	return true
}

// reason is the refusal reason of the data v, which s does not admit: the
// text schemaReason writes from gojsonschema's errors, without running
// gojsonschema. The errors come in gojsonschema's order except where that
// order is a Go map's (reasonWalk.chosen), and are the same errors.
func (s *fastSchema) reason(v any, names map[string]bool) string {
	r := newReasonText(names)
	w := reasonWalk{emit: r.add, room: reasonErrors + 1}
	s.errs(v, &w)
	if r.n == 0 {
		return "data does not match schema" // errs and valid disagree: not seen in fuzzing
	}
	return r.b.String()
}

// reasonWalk carries the errors errs finds to emit, with the path of the
// value being checked.
//
// gojsonschema checks a value's keywords in a fixed order, which errs
// follows: the type (and nothing more when it fails); for an object,
// required, then each member by patternProperties and
// additionalProperties, then const and enum, then each property; for an
// array, each item, minItems, maxItems, uniqueItems, then const and enum;
// for a string, const, enum, minLength, maxLength, pattern; for a number,
// maximum, minimum, const, enum. Three of its orders are Go maps': the
// members of the data object, the patterns a member matches, and (fixed
// when the schema is compiled, but at random) the properties. errs takes
// members and properties in the order of their names and patterns in the
// order of their text, and sets chosen when that order decided between
// two members, patterns or properties with errors: the same errors as
// gojsonschema's, in an order of its own that does not change from one
// message or one broker run to the next.
type reasonWalk struct {
	path []pathSeg
	// emit gets each error and reports whether to go on.
	emit func(field, typ string) bool
	// room, when not 0, is how many errors emit wants at most.
	room    int
	n       int
	stopped bool
	chosen  bool
}

// pathSeg is a member name, or an array index when index >= 0.
type pathSeg struct {
	name  string
	index int
}

// field writes the path as gojsonschema's ResultError.Field does.
func (w *reasonWalk) field() string {
	var b strings.Builder
	b.WriteString("(root)")
	for _, seg := range w.path {
		b.WriteByte('.')
		if seg.index >= 0 {
			b.WriteString(strconv.Itoa(seg.index))
		} else {
			b.WriteString(seg.name)
		}
	}
	return strings.TrimPrefix(b.String(), "(root).")
}

// add reports an error at the current path; it returns true when the walk
// is to stop.
func (w *reasonWalk) add(typ string) bool {
	w.n++
	if !w.emit(w.field(), typ) {
		w.stopped = true
	}
	return w.stopped
}

// sub walks v against s at the path extended by seg and reports whether
// it found errors there, and whether to stop.
func (w *reasonWalk) sub(s *fastSchema, v any, seg pathSeg) (found, stop bool) {
	n := w.n
	w.path = append(w.path, seg)
	stop = s.errs(v, w)
	w.path = w.path[:len(w.path)-1]
	return w.n > n, stop
}

// errs reports to w every error gojsonschema finds in v against s, in its
// order but for the orders of Go maps (reasonWalk), and returns true when
// w wants no more.
func (s *fastSchema) errs(v any, w *reasonWalk) bool {
	t, ok := typeOf(v)
	if !ok {
		return false
	}
	if s.types != 0 && s.types&t == 0 {
		return w.add("invalid_type")
	}
	switch x := v.(type) {
	case float64, json.Number:
		f, r, _ := numberValue(x)
		if s.above(f, r) && w.add("number_lte") {
			return true
		}
		if s.below(f, r) && w.add("number_gte") {
			return true
		}
		return s.choiceErrs(v, w)
	case string:
		if s.choiceErrs(v, w) {
			return true
		}
		l := s.lengthOK(x)
		if l&lenShort != 0 && w.add("string_gte") {
			return true
		}
		if l&lenLong != 0 && w.add("string_lte") {
			return true
		}
		return !s.matches(x) && w.add("pattern")
	case []any:
		if s.items != nil {
			for i, e := range x {
				if _, stop := w.sub(s.items, e, pathSeg{index: i}); stop {
					return true
				}
			}
		}
		if len(x) < s.minItems && w.add("array_min_items") {
			return true
		}
		if s.hasMaxItem && len(x) > s.maxItems && w.add("array_max_items") {
			return true
		}
		if s.unique && repeats(x, func(int) bool { return !w.add("unique") }) && w.stopped {
			return true
		}
		return s.choiceErrs(v, w)
	case map[string]any:
		return s.objectErrs(x, w)
	}
	return s.choiceErrs(v, w) // null and booleans
}

func (s *fastSchema) choiceErrs(v any, w *reasonWalk) bool {
	if s.hasConst && !scalarEqual(s.konst, v) && w.add("const") {
		return true
	}
	for _, e := range s.enum {
		if scalarEqual(e, v) {
			return false
		}
	}
	return s.enum != nil && w.add("enum")
}

func (s *fastSchema) objectErrs(x map[string]any, w *reasonWalk) bool {
	for _, r := range s.required {
		if _, ok := x[r]; !ok && w.add("required") {
			return true
		}
	}
	if s.noExtra || s.extra != nil || len(s.patterns) > 0 {
		if s.membersErrs(x, w) {
			return true
		}
	}
	if s.choiceErrs(x, w) {
		return true
	}
	failing := 0
	for _, name := range s.propNames {
		pv, ok := x[name]
		if !ok {
			continue
		}
		found, stop := w.sub(s.props[name], pv, pathSeg{name: name, index: -1})
		if found {
			failing++
			w.chosen = w.chosen || failing > 1
		}
		if stop {
			return true
		}
	}
	return false
}

// membersErrs reports the errors of the members of x that patternProperties
// or additionalProperties refuse, in the order of their names. Each such
// member has one error at least, so only as many of the first names as w
// has room for errors are kept and sorted.
func (s *fastSchema) membersErrs(x map[string]any, w *reasonWalk) bool {
	var names []string
	failing := 0
	for k, pv := range x {
		if s.memberValid(k, pv) {
			continue
		}
		failing++
		i, _ := slices.BinarySearch(names, k)
		if w.room > 0 && i >= w.room-w.n {
			continue
		}
		names = append(names, "")
		copy(names[i+1:], names[i:])
		names[i] = k
		if w.room > 0 && len(names) > w.room-w.n {
			names = names[:w.room-w.n]
		}
	}
	w.chosen = w.chosen || failing > 1
	for _, k := range names {
		if s.memberErrs(k, x[k], w) {
			return true
		}
	}
	return false
}

func (s *fastSchema) memberErrs(k string, pv any, w *reasonWalk) bool {
	_, matched := s.props[k]
	failing := 0
	for i := range s.patterns {
		p := &s.patterns[i]
		if !p.match(k) {
			continue
		}
		matched = true
		found, stop := w.sub(p.schema, pv, pathSeg{name: k, index: -1})
		if found {
			failing++
			w.chosen = w.chosen || failing > 1
		}
		if stop {
			return true
		}
	}
	switch {
	case matched:
		return false
	case s.noExtra:
		return w.add("additional_property_not_allowed")
	case s.extra != nil:
		_, stop := w.sub(s.extra, pv, pathSeg{name: k, index: -1})
		return stop
	}
	return false
}
