package schema

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"

	"github.com/xeipuuv/gojsonschema"

	"pigeon/internal/jsontext"
)

// wideObject is an object of n members "k0": 0 … with the member named
// bad, if any, holding a string instead.
func wideObject(n int, bad string) []byte {
	b := []byte{'{'}
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		k := "k" + strconv.Itoa(i)
		b = strconv.AppendQuote(b, k)
		b = append(b, ':')
		if k == bad {
			b = append(b, `"x"`...)
		} else {
			b = strconv.AppendInt(b, int64(i), 10)
		}
	}
	return append(b, '}')
}

// BenchmarkValidateWide is the schema gate on a 50,000-member object,
// valid and refused, against a schema with patternProperties (which
// gojsonschema matches by compiling each pattern for each member) and
// against one with properties only. "library" is gojsonschema's
// validation and reason, what the gate ran before the direct validator
// took these schemas and gave its own reasons; "fast" is the gate's path
// now (ValidateExact on the decoded document); "inexact" is the same with
// one number a double does not tell apart, which Validate used to leave
// to gojsonschema.
func BenchmarkValidateWide(b *testing.B) {
	schemas := []struct{ name, schema, bad string }{
		{"patternProperties", `{"type":"object","properties":{"id":{"type":"string"}},"patternProperties":{"^k[0-9]+$":{"type":"integer","minimum":0},"^x_":{"type":"string"}},"additionalProperties":false}`, "k49999"},
		{"properties", `{"type":"object","properties":{"id":{"type":"string"},"k49999":{"type":"integer"}}}`, "k49999"},
	}
	for _, sc := range schemas {
		sch, err := Compile([]byte(sc.schema))
		if err != nil {
			b.Fatal(err)
		}
		for _, valid := range []bool{true, false} {
			bad := ""
			if !valid {
				bad = sc.bad
			}
			raw := wideObject(50000, bad)
			doc, err := jsontext.DecodeDocument(raw, 64, nil)
			if err != nil || !doc.Exact {
				b.Fatal("the object does not decode exact")
			}
			name := fmt.Sprintf("%s/valid=%v/%dKB", sc.name, valid, len(raw)/1024)
			b.Run(name+"/decode", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := jsontext.DecodeDocument(raw, 64, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(name+"/library", benchLibrary(sch, raw, valid))
			b.Run(name+"/fast", benchVerdict(valid, func() string { return sch.ValidateExact(doc.Value, raw) }))
			// One number a double does not tell apart from its neighbours
			// (23 digits): Validate reads the data again with its numbers
			// as written, where it used to run gojsonschema.
			inexact := bytes.Replace(raw, []byte(`"k1":1,`), []byte(`"k1":10000000000000000000001,`), 1)
			idoc, err := jsontext.DecodeDocument(inexact, 64, nil)
			if err != nil || idoc.Exact {
				b.Fatal("the object does not decode inexact")
			}
			b.Run(name+"/inexact/library", benchLibrary(sch, inexact, valid))
			b.Run(name+"/inexact/fast", benchVerdict(valid, func() string { return sch.Validate(idoc.Value, inexact) }))
		}
	}
}

// benchVerdict benchmarks judge, the direct validator's reason (empty:
// valid), which must agree with valid.
func benchVerdict(valid bool, judge func() string) func(b *testing.B) {
	return func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r := judge(); (r == "") != valid {
				b.Fatal(r)
			}
		}
	}
}

// benchLibrary benchmarks gojsonschema's judgement of raw under sch (and
// its reason, as the gate took it, when raw is not valid).
func benchLibrary(sch *Schema, raw []byte, valid bool) func(b *testing.B) {
	return func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			res, err := sch.full.Validate(gojsonschema.NewBytesLoader(raw))
			if err != nil || res.Valid() != valid {
				b.Fatal("library verdict")
			}
			if !valid {
				_ = schemaReason(res.Errors(), sch.names)
			}
		}
	}
}

// BenchmarkValidateUniqueItems is the schema gate on an array of 100,000
// numbers, all distinct or all equal, against "uniqueItems": true:
// gojsonschema writes each item to JSON text three times, and an error
// with its description for each repeat; the direct validator hashes each
// item once and stops at the reason's sixth error.
func BenchmarkValidateUniqueItems(b *testing.B) {
	sch, err := Compile([]byte(`{"type":"array","uniqueItems":true}`))
	if err != nil || sch.fast == nil {
		b.Fatal("uniqueItems is not in the fast subset")
	}
	for _, valid := range []bool{true, false} {
		raw := []byte{'['}
		for i := range 100000 {
			if i > 0 {
				raw = append(raw, ',')
			}
			if valid {
				raw = strconv.AppendInt(raw, int64(1000000+i), 10)
			} else {
				raw = append(raw, "1000000"...)
			}
		}
		raw = append(raw, ']')
		doc, err := jsontext.DecodeDocument(raw, 64, nil)
		if err != nil || !doc.Exact {
			b.Fatal("the array does not decode exact")
		}
		name := fmt.Sprintf("valid=%v/%dKB", valid, len(raw)/1024)
		b.Run(name+"/library", benchLibrary(sch, raw, valid))
		b.Run(name+"/fast", benchVerdict(valid, func() string { return sch.ValidateExact(doc.Value, raw) }))
	}
}
