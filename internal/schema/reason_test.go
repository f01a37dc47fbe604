package schema

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/xeipuuv/gojsonschema"
)

// reasonSchemas are schemas of the direct validator's subset that
// exercise every keyword it reasons about, patternProperties and
// additionalProperties given as a schema among them.
var reasonSchemas = []string{
	`{"type":"object","required":["id","n"],"properties":{"id":{"type":"string","pattern":"^[a-z]{2}$"},"n":{"type":"integer","maximum":5}},"patternProperties":{"^x_[a-z]+$":{"type":"string","maxLength":3},"^x_":{"minLength":2},"n":{"minimum":0}},"additionalProperties":{"type":"number","minimum":0,"maximum":9}}`,
	`{"type":"object","required":["a"],"patternProperties":{"^[a-c]$":{"type":"array","items":{"type":"integer"},"uniqueItems":true,"maxItems":3}},"additionalProperties":false}`,
	`{"type":"object","properties":{"meta":{"type":"object","additionalProperties":{"type":"object","additionalProperties":{"type":"string"}}}},"additionalProperties":true}`,
	`{"type":["array","null"],"uniqueItems":true,"minItems":2,"items":{"enum":[1,"x",null,false,0.5,-0]}}`,
	`{"patternProperties":{"^[A-Z]{3}$":{"const":"c","maxLength":1},"[0-9]":{"type":["string","boolean"],"enum":["a",true]}},"additionalProperties":{}}`,
	`{"type":"object","properties":{"s":{"type":"array","uniqueItems":true}}}`,
}

// reasonSeeds are documents for reasonSchemas and testSchemas.
var reasonSeeds = []string{
	`{"id":"ab","n":3}`, `{"id":"abc","n":9,"x_ab":"long","x_":"y","q":-1,"r":10,"s":"str"}`, `{"n":-1}`, `{"n":"x"}`,
	`{"a":[1,2,2,2],"b":[1,"x"],"d":1,"4111111111111111":[]}`, `{"a":[1,2,3,4]}`, `{"a":{}}`, `{"a":[1.0,1]}`,
	`{"meta":{"k":{"a":"s","b":1},"a.b":{"c":true},"":{"":null}}}`, `{"meta":[]}`,
	`[1,1]`, `[1]`, `[1,"x",null,false,2]`, `[0,-0]`, `[0.5,0.5,0.5]`, `null`, `[]`, `"x"`,
	`{"ABC":"c","ABD":1,"A1":"a","1":false,"AB1":"b","9":null}`, `{"ABC":"d","x1":true}`, `{"ABC":"dd"}`, `{"ABC":5}`,
	`{"s":[[1,2],[1,2],{"a":1,"b":[2]},{"b":[2],"a":1},"x","x",1,1.0,true,true,null,null,{},[]]}`, `{"s":[{"a":"<"},{"a":"\u003c"}]}`,
	`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP","paymentToken":"t"}`,
	`{"merchantId":1,"amount":"1","currency":"gbp","card":{"pan":5},"x":1}`, `{}`,
	`{"recipientId":"r","channel":"fax","templateId":1,"params":[],"recipient":{"ssn":1}}`,
	`{"n":3.5,"s":"ééééé","a":[],"c":false,"z":1}`, `{"n":11,"s":"a","a":[1,2,3,"x"],"c":1}`, `[2,{}]`,
	// numbers a double does not tell apart: read as written
	`{"id":"ab","n":5.0000000000000000001}`, `{"id":"ab","n":1e-400}`, `{"n":-0.00000000000000000001,"q":0.0000000000000000000001}`,
	`{"n":10.0000000000000000001,"a":[1.0000000000000000001]}`, `[1.00000000000000000001,1]`, `[0.5000000000000000000001,0.5]`,
	`{"s":[[1,2],[1.00000000000000000001,2]]}`, `{"amount":12345678901234567890,"merchantId":"m"}`,
}

// fastErrors is every error the direct validator finds in data, as
// gojsonschema would name it, and whether the order of them is one the
// direct validator chose where gojsonschema follows map iteration.
func fastErrors(s *fastSchema, data any) (errs []string, chosen bool) {
	w := reasonWalk{emit: func(field, typ string) bool {
		errs = append(errs, field+": "+typ)
		return true
	}}
	s.errs(data, &w)
	return errs, w.chosen
}

func libraryErrors(res *gojsonschema.Result) []string {
	var errs []string
	for _, e := range res.Errors() {
		errs = append(errs, e.Field()+": "+e.Type())
	}
	return errs
}

// checkReason holds the direct validator's reason for data to
// gojsonschema's: the same errors always; the same text (order, cap and
// hidden names) unless gojsonschema's order is that of a Go map, in which
// case the direct validator's order is its own (sorted member names,
// patterns and property names) and only the errors are compared.
func checkReason(t *testing.T, s *Schema, doc string) {
	t.Helper()
	data, ok := fastInput(doc)
	if !ok {
		return
	}
	res, err := s.full.Validate(gojsonschema.NewBytesLoader([]byte(doc)))
	if err != nil {
		return
	}
	got, chosen := fastErrors(s.fast, data)
	want := libraryErrors(res)
	require.Equal(t, res.Valid(), s.fast.valid(data), "verdict on %s", doc)
	require.Equal(t, len(got) == 0, s.fast.valid(data), "errors and verdict agree on %s", doc)
	if res.Valid() {
		return
	}
	if !chosen {
		require.Equal(t, want, got, "errors in order on %s", doc)
		require.Equal(t, schemaReason(res.Errors(), s.names), s.fast.reason(data, s.names), doc)
		return
	}
	slices.Sort(got)
	slices.Sort(want)
	require.Equal(t, want, got, "errors on %s", doc)
	require.Equal(t, len(want) > 5, strings.HasSuffix(s.fast.reason(data, s.names), "; …"), doc)
}

// fastInput is the document doc as Validate gives it to the direct
// validator: decoded to float64 when its numbers are exact, else with
// json.Number.
func fastInput(doc string) (any, bool) {
	if !exactNumbers([]byte(doc)) {
		return numberData([]byte(doc))
	}
	var data any
	return data, json.Unmarshal([]byte(doc), &data) == nil
}

func compileAll(t testing.TB, schemas []string) []*Schema {
	var out []*Schema
	for _, src := range schemas {
		s, err := Compile([]byte(src))
		require.NoError(t, err, src)
		require.NotNil(t, s.fast, "in the direct validator's subset: %s", src)
		out = append(out, s)
	}
	return out
}

func TestFastReasonMatchesLibrary(t *testing.T) {
	schemas := compileAll(t, append(slices.Clone(testSchemas), reasonSchemas...))
	for i, s := range schemas {
		for _, doc := range reasonSeeds {
			t.Run(fmt.Sprintf("%d/%s", i, doc), func(t *testing.T) { checkReason(t, s, doc) })
		}
	}
}

// A refusal by the direct validator gives its reason without running
// gojsonschema: a sender who makes every message fail would otherwise
// make the broker run the reference validator on each.
func TestFastReasonNeedsNoLibrary(t *testing.T) {
	for _, tt := range []struct{ schema, doc, want string }{
		{reasonSchemas[0], `{"id":"abc","n":9,"x_ab":"long"}`, "data does not match schema: *: string_lte; id: pattern; n: number_lte"},
		{reasonSchemas[1], `{"a":[1,1],"zz":1}`, "data does not match schema: a: unique; (root): additional_property_not_allowed"},
		{reasonSchemas[2], `{"meta":{"4111111111111111":{"a.b":1}}}`, "data does not match schema: meta.*.*.*: invalid_type"},
		{testSchemas[0], `{}`, "data does not match schema: (root): required; (root): required; (root): required; (root): required; (root): required"},
		{testSchemas[2], `{"a":["1","2","3","4"],"n":-1}`, "data does not match schema: a.0: invalid_type; a.1: invalid_type; a.2: invalid_type; a.3: invalid_type; a: array_max_items; …"},
	} {
		t.Run(tt.doc, func(t *testing.T) {
			s, err := Compile([]byte(tt.schema))
			require.NoError(t, err)
			require.NotNil(t, s.fast)
			var data any
			require.NoError(t, json.Unmarshal([]byte(tt.doc), &data))
			s.full = nil // the reference validator must not be needed
			require.Equal(t, tt.want, s.ValidateExact(data, []byte(tt.doc)))
			require.Equal(t, tt.want, s.Validate(data, []byte(tt.doc)))
		})
	}
}

// FuzzFastReason holds the direct validator's errors and reason to
// gojsonschema's (checkReason) on every document.
func FuzzFastReason(f *testing.F) {
	for _, seed := range reasonSeeds {
		f.Add(seed)
	}
	schemas := compileAll(f, append(slices.Clone(testSchemas), reasonSchemas...))
	f.Fuzz(func(t *testing.T, doc string) {
		for _, s := range schemas {
			checkReason(t, s, doc)
		}
	})
}

// A number a double does not tell apart from its neighbours must not send
// the message to gojsonschema: a sender would add one to choose the cost
// of every message. The direct validator reads such numbers as written.
func TestInexactNumberKeepsFastPath(t *testing.T) {
	for _, tt := range []struct{ schema, doc, want string }{
		{`{"type":"integer"}`, `3.0000000000000000001`, "data does not match schema: (root): invalid_type"},
		{`{"type":"integer"}`, `30000000000000000000000`, ""},
		{`{"maximum":100}`, `100.0000000000000001`, "data does not match schema: (root): number_lte"},
		{`{"minimum":0.1}`, `0.1000000000000000000001`, ""},
		{`{"minimum":0.1}`, `0.0999999999999999999999`, "data does not match schema: (root): number_gte"},
		{`{"enum":[1]}`, `1.0000000000000000001`, inexactChoiceReason},
		{`{"type":"array","uniqueItems":true}`, `[1.0000000000000000001,1]`, "data does not match schema: (root): unique"},
		{`{"type":"array","uniqueItems":true}`, `[[1.0000000000000000001],[1]]`, "data does not match schema: (root): unique"},
		{reasonSchemas[0], `{"id":"ab","n":6.00000000000000000000,"x_ab":"a"}`, "data does not match schema: *: string_gte; n: number_lte"},
		{reasonSchemas[0], `{"id":"ab","n":4.9999999999999999999,"x_ab":"ab","k":1e-400}`, "data does not match schema: n: invalid_type"},
	} {
		t.Run(tt.schema+" "+tt.doc, func(t *testing.T) {
			s, err := Compile([]byte(tt.schema))
			require.NoError(t, err)
			require.NotNil(t, s.fast)
			res, err := s.full.Validate(gojsonschema.NewBytesLoader([]byte(tt.doc)))
			require.NoError(t, err)
			if tt.want != inexactChoiceReason {
				require.Equal(t, tt.want == "", res.Valid(), "gojsonschema agrees")
			}
			var data any
			require.NoError(t, json.Unmarshal([]byte(tt.doc), &data))
			s.full = nil // the reference validator must not be needed
			require.Equal(t, tt.want, s.Validate(data, []byte(tt.doc)))
		})
	}
}
