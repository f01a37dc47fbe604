package pigeon

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"pigeon/internal/textrule"
)

// Selector limits. A selector over either limit is SELECTOR_INVALID.
const (
	// MaxSelectorLen is the longest selector text accepted, in bytes.
	MaxSelectorLen = 1024
	// MaxSelectorSegments is the largest number of '/'-separated segments
	// accepted, counting a '*' and the segments ignored after it.
	MaxSelectorSegments = 32
)

// Selector is a parsed content-routing selector: a conjunction of tests on
// fields of a message's data. The grammar is in docs/delivery.md; in short:
//
//	/                      matches everything
//	/kind=chat/room=lobby  kind equals "chat" AND room equals "lobby"
//	/narf                  field narf is present (also /narf= and /narf=*)
//	/customer.tier=gold    dotted keys walk into objects and arrays
//	/0=foo                 on array data, an integer key is an index
//	/kind=chat/*           a * segment ends the selector: it and whatever
//	                       follows it are ignored (/kind=chat/*/x is /kind=chat)
//
// A Selector is immutable and safe for concurrent use. Match never re-parses
// and does not allocate for the JSON value types.
//
// The zero Selector matches every message; it is equal to the result of
// ParseSelector("/"). Selector is deliberately not comparable with == (two
// parses of the same text would hold different slices): compare with Equal
// and use Key as a map key.
type Selector struct {
	canon string    // canonical text, "" for match-all
	terms []selTerm // sorted by text, no duplicates
}

// selTerm is one segment: a presence test or an equality test on a key path.
type selTerm struct {
	text     string    // canonical segment text, e.g. "customer.tier=gold"
	key      string    // canonical key text, e.g. "customer.tier"
	path     []selPart // key split on unescaped '.', escapes decoded
	value    string    // wanted value, escapes decoded; unused for presence
	presence bool      // key must be present; value is ignored
}

// selPart is one step of a key path: an object member name, which is also an
// array index when it is a canonical non-negative integer.
type selPart struct {
	name  string
	index int // -1 when name is not an array index
}

// ParseSelector parses and canonicalizes a selector. Any malformed input is
// an *Error with code SELECTOR_INVALID (errors.Is(err, ErrInvalid) holds);
// a malformed selector never degrades to match-all. The error message names
// a byte offset, never the selector text.
//
// A segment that is exactly '*' ends the selector, as in mesgd: it matches
// everything from there on, so the text after it is not parsed and adds
// nothing ("/foo=bar/*/narf=borf" is "/foo=bar"). Only the checks on the
// whole text (length, segment count, UTF-8, control characters) and the
// rule of names (no formatting character) still apply to it.
//
// What a selector may hold follows what each part is. The whole text is
// one line (a URL path, a frame's field, a role's permission) and holds
// no control character (C0, DEL, C1). A key is a path of field names,
// names as the catalog's field paths are: it holds no formatting
// character that reorders or breaks a line either (U+202E, U+2066, U+2028
// and the rest of hasControl's), nor does the ignored text after a '*'
// segment. A value is data, not a name: it is compared with a string of
// the message, which may be right-to-left text that carries such
// characters (U+200F RIGHT-TO-LEFT MARK, an isolate around a name), so it
// may hold them, as the message's data does (the pigeon CLI escapes them
// where it prints either).
func ParseSelector(s string) (Selector, error) {
	switch {
	case s == "":
		return Selector{}, selectorError("selector is empty")
	case len(s) > MaxSelectorLen:
		return Selector{}, selectorError("selector is %d bytes, over the limit of %d", len(s), MaxSelectorLen)
	case s[0] != '/':
		return Selector{}, selectorError("selector must start with '/'")
	}
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return Selector{}, selectorError("invalid UTF-8 at byte %d", i)
			}
		}
		if unicode.IsControl(r) {
			return Selector{}, selectorError("control character at byte %d", i)
		}
	}
	if s == "/" {
		return Selector{}, nil
	}
	rest := s[1:]
	n := strings.Count(rest, "/") + 1
	if n > MaxSelectorSegments {
		return Selector{}, selectorError("selector has %d segments, over the limit of %d", n, MaxSelectorSegments)
	}
	terms := make([]selTerm, 0, n)
	off := 1 // byte offset of the current segment in s
	for range n {
		seg, tail, _ := strings.Cut(rest, "/")
		if seg == "*" {
			// As mesgd parses paths: '*' matches everything from here on,
			// so whatever follows it is not read at all, but for the rule
			// of names: it is no value.
			if i := strings.IndexFunc(tail, textrule.IsFormatting); i >= 0 {
				return Selector{}, selectorError("formatting character at byte %d", off+len(seg)+1+i)
			}
			break
		}
		if seg == "" {
			return Selector{}, selectorError("empty segment at byte %d", off)
		}
		t, err := parseTerm(seg, off)
		if err != nil {
			return Selector{}, err
		}
		terms = append(terms, t)
		off += len(seg) + 1
		rest = tail
	}
	if len(terms) == 0 {
		return Selector{}, nil // "/*"
	}
	slices.SortFunc(terms, func(a, b selTerm) int { return strings.Compare(a.text, b.text) })
	terms = slices.CompactFunc(terms, func(a, b selTerm) bool { return a.text == b.text })
	var b strings.Builder
	for _, t := range terms {
		b.WriteByte('/')
		b.WriteString(t.text)
	}
	return Selector{canon: b.String(), terms: slices.Clip(terms)}, nil
}

// parseTerm parses one non-empty, non-'*' segment that starts at byte off.
// The segment splits on its first '=': everything after it is the value, so
// a value may contain '='.
func parseTerm(seg string, off int) (selTerm, error) {
	rawKey, rawVal, hasEq := strings.Cut(seg, "=")
	if rawKey == "" {
		return selTerm{}, selectorError("empty key at byte %d", off)
	}
	var t selTerm
	var key strings.Builder
	t.path = make([]selPart, 0, strings.Count(rawKey, ".")+1)
	p := off
	for raw := range strings.SplitSeq(rawKey, ".") {
		if raw == "" {
			return selTerm{}, selectorError("empty key part at byte %d", p)
		}
		if i := strings.IndexFunc(raw, textrule.IsFormatting); i >= 0 {
			// A key is a field name: ParseSelector says why a value may
			// hold one and a key may not.
			return selTerm{}, selectorError("formatting character in a key at byte %d", p+i)
		}
		name, err := unescapeSelector(raw, p)
		if err != nil {
			return selTerm{}, err
		}
		if len(t.path) > 0 {
			key.WriteByte('.')
		}
		escapeSelector(&key, name, true)
		t.path = append(t.path, selPart{name: name, index: arrayIndex(name)})
		p += len(raw) + 1
	}
	t.key = key.String()
	if !hasEq || rawVal == "" || rawVal == "*" {
		t.presence = true
		t.text = t.key
		return t, nil
	}
	v, err := unescapeSelector(rawVal, off+len(rawKey)+1)
	if err != nil {
		return selTerm{}, err
	}
	t.value = v
	key.WriteByte('=')
	escapeSelector(&key, v, false)
	t.text = key.String()
	return t, nil
}

// unescapeSelector decodes the percent-escapes of one key part or value
// that starts at byte off. Only %2F '/', %3D '=', %2E '.', %25 '%' and
// %2A '*' are escapes (hex digits in either case); a bare '*' is reserved.
func unescapeSelector(s string, off int) (string, error) {
	if strings.IndexByte(s, '*') >= 0 {
		return "", selectorError("'*' at byte %d is reserved; write %%2A for a literal star", off+strings.IndexByte(s, '*'))
	}
	if strings.IndexByte(s, '%') < 0 {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) {
			return "", selectorError("truncated escape at byte %d", off+i)
		}
		switch strings.ToUpper(s[i+1 : i+3]) {
		case "2F":
			c = '/'
		case "3D":
			c = '='
		case "2E":
			c = '.'
		case "25":
			c = '%'
		case "2A":
			c = '*'
		default:
			return "", selectorError("invalid escape at byte %d", off+i)
		}
		b.WriteByte(c)
		i += 2
	}
	return b.String(), nil
}

// escapeSelector writes s in canonical form: a key part escapes % / = . *,
// a value escapes only % / * (it is split on the first '=' and never on '.').
func escapeSelector(b *strings.Builder, s string, key bool) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '%':
			b.WriteString("%25")
		case c == '/':
			b.WriteString("%2F")
		case c == '*':
			b.WriteString("%2A")
		case c == '=' && key:
			b.WriteString("%3D")
		case c == '.' && key:
			b.WriteString("%2E")
		default:
			b.WriteByte(c)
		}
	}
}

// arrayIndex returns name as an array index, or -1 when name is not a
// canonical non-negative decimal integer ("0", "17"; not "01", "+1", "-1").
func arrayIndex(name string) int {
	if name == "" || len(name) > 9 || (name[0] == '0' && len(name) > 1) {
		return -1
	}
	n := 0
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

func selectorError(format string, args ...any) *Error {
	return NewError(CodeSelectorInvalid, format, args...)
}

// String returns the canonical form: segments sorted and deduplicated,
// "key=" and "key=*" written as "key", a "*" segment and everything after
// it dropped, escapes
// written only where needed in upper case. The zero Selector is "/".
// ParseSelector(s.String()) returns a selector Equal to s.
func (s Selector) String() string {
	if s.canon == "" {
		return "/"
	}
	return s.canon
}

// Key returns a string that is equal for two selectors exactly when they
// are Equal; use it as a map key. It is the canonical form, String().
func (s Selector) Key() string { return s.String() }

// Equal reports whether s and o have the same canonical form. Equal
// selectors match the same messages.
func (s Selector) Equal(o Selector) bool { return s.canon == o.canon }

// Match reports whether data, the decoded JSON value of a message's data,
// satisfies every segment of s. data is what encoding/json decodes into an
// any: map[string]any, []any, string, float64, bool or nil; json.Number
// (from Decoder.UseNumber) is accepted too. Values of other Go types are
// never equal to a selector value and never walked into.
//
// A number is equal to a selector value when its JSON text, as
// encoding/json writes a float64, is the value ("3", "2.5", "1e+21"); a
// json.Number is also equal when its literal text is the value. A boolean
// is "true" or "false", null is "null"; objects and arrays are never equal
// to a value. Match does not allocate.
func (s Selector) Match(data any) bool { return s.match(data, false) }

// matchScope is Match for a role permission's scope, which grants: a
// decoded number beyond ±2^53 is equal to no value there. Such a double
// stands for many texts (9007199254740992 and 9007199254740993 decode
// alike), and the store keeps, and a receiver that reads numbers exactly
// gets, the text, so equating it would let a principal scoped to one value
// publish and receive another's messages. A json.Number's literal text is
// still equal to itself.
func (s Selector) matchScope(data any) bool { return s.match(data, true) }

func (s Selector) match(data any, scope bool) bool {
	for i := range s.terms {
		t := &s.terms[i]
		v, ok := selectorLookup(data, t.path)
		if !ok || (!t.presence && !scalarEquals(v, t.value, scope)) {
			return false
		}
	}
	return true
}

// exactDouble reports whether f is the only number a JSON text decoding
// to it can be, as far as selectors compare numbers: below 2^53 in
// magnitude, where every integer is a double of its own.
func exactDouble(f float64) bool { return math.Abs(f) < 1<<53 }

// selectorLookup walks path from data: an object by member name, an array by index.
func selectorLookup(data any, path []selPart) (any, bool) {
	for i := range path {
		switch c := data.(type) {
		case map[string]any:
			v, ok := c[path[i].name]
			if !ok {
				return nil, false
			}
			data = v
		case []any:
			idx := path[i].index
			if idx < 0 || idx >= len(c) {
				return nil, false
			}
			data = c[idx]
		default:
			return nil, false
		}
	}
	return data, true
}

// scalarEquals reports whether the JSON scalar v has the text want; with
// exact, a number beyond ±2^53 is equal only to its own literal text.
func scalarEquals(v any, want string, exact bool) bool {
	switch x := v.(type) {
	case string:
		return x == want
	case bool:
		if x {
			return want == "true"
		}
		return want == "false"
	case nil:
		return want == "null"
	case float64:
		if !maybeNumber(want) || exact && !exactDouble(x) {
			return false
		}
		var buf [32]byte
		b, ok := appendJSONFloat(buf[:0], x)
		return ok && string(b) == want
	case json.Number:
		if string(x) == want {
			return true
		}
		if !maybeNumber(want) {
			return false
		}
		f, err := x.Float64()
		if err != nil || exact && !exactDouble(f) {
			return false
		}
		var buf [32]byte
		b, ok := appendJSONFloat(buf[:0], f)
		return ok && string(b) == want
	}
	return false
}

// maybeNumber is a cheap filter: JSON number text starts with '-' or a digit.
func maybeNumber(s string) bool {
	return s != "" && (s[0] == '-' || (s[0] >= '0' && s[0] <= '9'))
}

// appendJSONFloat appends f as encoding/json writes a float64 (ES6 number
// to string: %f-like between 1e-6 and 1e21, else exponent without padding).
// It reports false for NaN and infinities, which JSON cannot carry.
func appendJSONFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, false
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-07 → e-7, as encoding/json does.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}
