package schema

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/xeipuuv/gojsonschema"
)

// objectNames are the member names generated schemas and documents use:
// plain ones, one beyond ASCII, the empty name, one with a quote, and
// prefixes of each other (for patternProperties).
var objectNames = []string{"a", "b", "ab", "z", "é", "", `q"`}

// objectValues are the member values generated documents use: one of each
// type, a negative zero, an integer at 15 digits and one past, a nested
// object, arrays.
var objectValues = []string{`"x"`, `1`, `1.5`, `-0`, `123456789012345`, `1234567890123456`, `true`, `null`, `{}`, `{"a":1}`, `{"a":"s","b":2}`, `[]`, `[1]`}

var objectTypes = []string{"string", "number", "integer", "boolean", "null", "object", "array"}

// byteReader hands out a fuzz input a byte at a time, 0 once it is spent.
type byteReader struct {
	b []byte
	i int
}

func (r *byteReader) next() int {
	if r.i >= len(r.b) {
		return 0
	}
	r.i++
	return int(r.b[r.i-1])
}

func (r *byteReader) pick(n int) int { return r.next() % n }

// quoteName writes name as a JSON string, plainly or (escape) with its
// first character as a \u escape, so that a document may spell a name
// the schema writes plainly.
func quoteName(name string, escape bool) string {
	if escape && name != "" && name[0] < 0x80 {
		return `"\u00` + strconv.FormatInt(int64(name[0])>>4, 16) + strconv.FormatInt(int64(name[0])&15, 16) + strconv.Quote(name[1:])[1:]
	}
	return strconv.Quote(name)
}

// genObjectSchema writes an object schema: properties of some names,
// required names among them and beyond them, and maybe
// patternProperties and additionalProperties beside them, nested one
// level in a property.
func genObjectSchema(r *byteReader, depth int) string {
	var parts []string
	if r.pick(2) == 0 {
		parts = append(parts, `"type":"object"`)
	}
	var props []string
	for _, name := range objectNames {
		switch k := r.pick(10); {
		case k < 5:
		case k == 9 && depth == 0:
			props = append(props, quoteName(name, false)+":"+genObjectSchema(r, depth+1))
		default:
			props = append(props, quoteName(name, false)+`:{"type":"`+objectTypes[r.pick(len(objectTypes))]+`"}`)
		}
	}
	if len(props) > 0 || r.pick(2) == 0 {
		parts = append(parts, `"properties":{`+strings.Join(props, ",")+`}`)
	}
	var req []string
	for range r.pick(5) {
		if q := quoteName(objectNames[r.pick(len(objectNames))], false); !slices.Contains(req, q) {
			req = append(req, q) // a schema's required names are unique
		}
	}
	if len(req) > 0 {
		parts = append(parts, `"required":[`+strings.Join(req, ",")+`]`)
	}
	switch r.pick(4) {
	case 1:
		parts = append(parts, `"patternProperties":{"^a":{"type":"`+objectTypes[r.pick(len(objectTypes))]+`"}}`)
	case 2:
		parts = append(parts, `"additionalProperties":false`)
	case 3:
		parts = append(parts, `"additionalProperties":{"type":"`+objectTypes[r.pick(len(objectTypes))]+`"}`)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// genObjectDoc writes an object of some of the names, each once, spelled
// plainly or escaped, or now and then another kind of value.
func genObjectDoc(r *byteReader) string {
	if r.pick(16) == 0 {
		return objectValues[r.pick(len(objectValues))]
	}
	var members []string
	for _, name := range objectNames {
		if r.pick(3) == 0 {
			continue
		}
		members = append(members, quoteName(name, r.pick(2) == 0)+":"+objectValues[r.pick(len(objectValues))])
	}
	for i := range r.pick(4) {
		members = append(members, `"m`+strconv.Itoa(i)+`":1`)
	}
	return "{" + strings.Join(members, ",") + "}"
}

// checkObjectsAgree holds the direct validator to gojsonschema on the
// schema and documents in derives from b.
func checkObjectsAgree(t *testing.T, b []byte) {
	r := &byteReader{b: b}
	src := genObjectSchema(r, 0)
	s, err := Compile([]byte(src))
	require.NoError(t, err, src)
	if s.fast == nil {
		return
	}
	for range 4 {
		doc := genObjectDoc(r)
		data, ok := fastInput(doc)
		require.True(t, ok, doc)
		res, err := s.full.Validate(gojsonschema.NewBytesLoader([]byte(doc)))
		require.NoError(t, err, doc)
		require.Equal(t, res.Valid(), s.fast.valid(data), "schema %s on %s (%v)", src, doc, res.Errors())
		checkFlat(t, s, doc)
	}
}

// TestFastObjectsAgreeWithGojsonschema: for object schemas of properties,
// required names inside and outside them, patternProperties and
// additionalProperties together, and documents that spell names plainly
// or escaped, the direct validator's answer is gojsonschema's.
func TestFastObjectsAgreeWithGojsonschema(t *testing.T) {
	for seed := range 3000 {
		b := make([]byte, 64)
		x := uint64(seed)*0x9e3779b97f4a7c15 + 1
		for i := range b {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			b[i] = byte(x)
		}
		checkObjectsAgree(t, b)
	}
}

func FuzzFastObjectsAgreeWithGojsonschema(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte("\x09\x09\x09\x09\x09\x09\x09\x04\x01\x02\x03\x01\x01\x00\x00\x00"))
	f.Fuzz(checkObjectsAgree)
}
