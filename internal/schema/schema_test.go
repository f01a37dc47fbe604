package schema

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/xeipuuv/gojsonschema"

	"pigeon/internal/jsontext"
)

var testSchemas = []string{
	`{"type":"object","required":["merchantId","amount","currency","paymentToken","orderId"],"properties":{"merchantId":{"type":"string"},"orderId":{"type":"string"},"amount":{"type":"number"},"currency":{"type":"string","pattern":"^[A-Z]{3}$"},"paymentToken":{"type":"string"},"card":{"type":"object","properties":{"pan":{"type":"string"}}}}}`,
	`{"type":"object","required":["recipientId","channel","templateId"],"properties":{"recipientId":{"type":"string"},"channel":{"type":"string","enum":["email","sms","push"]},"templateId":{"type":"string"},"locale":{"type":"string"},"params":{"type":"object"},"recipient":{"type":"object","properties":{"ssn":{"type":"string"}}}}}`,
	`{"type":"object","additionalProperties":false,"properties":{"n":{"type":"integer","minimum":0,"maximum":10},"s":{"type":["string","null"],"minLength":2,"maxLength":4},"a":{"type":"array","items":{"type":"number"},"minItems":1,"maxItems":3},"c":{"const":true}}}`,
	`{"type":["object","array"],"items":{"enum":[1,"x",null,false]}}`,
}

func TestFastSchemaCompiles(t *testing.T) {
	for i, s := range testSchemas {
		var doc any
		require.NoError(t, json.Unmarshal([]byte(s), &doc))
		require.NotNil(t, compileFast(doc), "schema %d is in the fast subset", i)
	}
	for _, s := range []string{`{"type":"object","additionalProperties":{"type":"string"}}`, `{"patternProperties":{"^[a-z]+$":{"type":"string"},"x":{}}}`, `{"uniqueItems":true}`} {
		var doc any
		require.NoError(t, json.Unmarshal([]byte(s), &doc))
		require.NotNil(t, compileFast(doc), s)
	}
	for _, s := range []string{`{"oneOf":[{"type":"string"}]}`, `{"additionalProperties":{"format":"email"}}`, `{"patternProperties":{"a":{"format":"email"}}}`, `{"patternProperties":[]}`, `{"uniqueItems":1}`, `{"format":"email"}`, `{"exclusiveMinimum":1}`, `{"enum":[{"a":1}]}`} {
		var doc any
		require.NoError(t, json.Unmarshal([]byte(s), &doc))
		require.Nil(t, compileFast(doc), s)
	}
}

// A schema that reads two ways is refused: an object with a member named
// twice (the validators would keep the last, a reviewer reads the first),
// even once escaped, or a string that is not UTF-8.
func TestAmbiguousSchemaRefused(t *testing.T) {
	for _, s := range []string{
		`{"type":"object","required":["amount"],"required":[]}`,
		`{"type":"object","properties":{"amount":{"type":"number","type":"string"}}}`,
		`{"type":"object","\u0074ype":"array"}`,
		"{\"type\":\"object\",\"properties\":{\"\xff\":{}}}",
	} {
		_, err := Compile([]byte(s))
		var je *jsontext.Error
		require.ErrorAs(t, err, &je, "%q", s)
	}
	_, err := Compile([]byte(`{"type":"object","properties":{"type":{"type":"string"}}}`))
	require.NoError(t, err, "one name in two objects is no repeat")
}

func TestSchemaFallbackValidates(t *testing.T) {
	sch, err := Compile([]byte(`{"type":"object","properties":{"e":{"type":"string","format":"email"}}}`))
	require.NoError(t, err)
	require.Nil(t, sch.fast)
	require.Empty(t, sch.Validate(map[string]any{"e": "a@b.example"}, []byte(`{"e":"a@b.example"}`)))
	require.Contains(t, sch.Validate(map[string]any{"e": "nope"}, []byte(`{"e":"nope"}`)), "e: format")
}

func TestSchemaReasonHasNoValues(t *testing.T) {
	sch, err := Compile([]byte(testSchemas[0]))
	require.NoError(t, err)
	raw := `{"merchantId":"secret-merchant","amount":"4111111111111111","currency":"pounds"}`
	var data any
	require.NoError(t, json.Unmarshal([]byte(raw), &data))
	reason := sch.Validate(data, []byte(raw))
	require.Contains(t, reason, "amount: invalid_type")
	require.NotContains(t, reason, "4111111111111111")
	require.NotContains(t, reason, "pounds")
}

// FuzzSchemaAgreement holds the fast validator to gojsonschema's verdict,
// on testSchemas and on reasonSchemas (patternProperties,
// additionalProperties as a schema, uniqueItems).
func FuzzSchemaAgreement(f *testing.F) {
	for _, seed := range []string{
		`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP","paymentToken":"t"}`,
		`{"merchantId":"m","orderId":"o","amount":1.5,"currency":"gbp","paymentToken":"t","card":{"pan":5}}`,
		`{"recipientId":"r","channel":"sms","templateId":"t","params":[]}`,
		`{"n":3,"s":"ab","a":[1,2],"c":true}`, `{"n":3.5}`, `{"n":-1,"x":1}`, `{"s":null}`, `{"s":"ééééé"}`,
		`[1,"x",null,false]`, `[2]`, `{}`, `null`, `"str"`, `1e400`,
	} {
		f.Add(seed)
	}
	for _, seed := range reasonSeeds {
		f.Add(seed)
	}
	var compiled []*Schema
	for _, s := range append(slices.Clone(testSchemas), reasonSchemas...) {
		c, err := Compile([]byte(s))
		if err != nil || c.fast == nil {
			f.Fatal("schema does not compile to the fast subset")
		}
		compiled = append(compiled, c)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		data, ok := fastInput(doc)
		if !ok {
			return
		}
		for i, c := range compiled {
			res, err := c.full.Validate(gojsonschema.NewBytesLoader([]byte(doc)))
			if err != nil {
				continue
			}
			if got := c.fast.valid(data); got != res.Valid() {
				t.Fatalf("schema %d on %s: fast=%v gojsonschema=%v (%v)", i, doc, got, res.Valid(), res.Errors())
			}
		}
	})
}

// A reason names fields by the schema's own names: a member name the
// schema does not declare is data the publisher chose (a card number, an
// email address), and reasons go into the audit log, which is never
// rewritten. Such a name is shown as *; array indices stay.
func TestSchemaReasonHasNoMemberNamesFromData(t *testing.T) {
	sch, err := Compile([]byte(`{"type":"object","properties":{
		"metadata":{"type":"object","additionalProperties":{"type":"string"}},
		"items":{"type":"array","items":{"type":"object","properties":{"qty":{"type":"integer"}}}}}}`))
	require.NoError(t, err)
	for _, tt := range []struct{ raw, want string }{
		{`{"metadata":{"4111111111111111":5}}`, "metadata.*: invalid_type"},
		{`{"metadata":{"a@b.example":true}}`, "metadata.*.*: invalid_type"}, // a name holding a dot shows as two
		{`{"items":[{"qty":1},{"qty":"x"}]}`, "items.1.qty: invalid_type"},
	} {
		var data any
		require.NoError(t, json.Unmarshal([]byte(tt.raw), &data))
		reason := sch.Validate(data, []byte(tt.raw))
		require.Contains(t, reason, tt.want, tt.raw)
		require.NotContains(t, reason, "4111111111111111")
		require.NotContains(t, reason, "a@b.example")
	}
}

// gojsonschema compares enum and const members as doubles: a value whose
// double is a member's is admitted as that member unless its value is one
// (jsontext's exactness aside, a member a double does not hold exactly
// admitted its neighbour, and the direct validator compared as doubles).
func TestSchemaChoicesCompareExactly(t *testing.T) {
	tests := []struct {
		schema, data string
		valid        bool
	}{
		{`{"enum":[9007199254740993]}`, `9007199254740993`, true},
		{`{"enum":[9007199254740993]}`, `9007199254740992`, false},
		{`{"enum":[9007199254740991]}`, `9007199254740991`, true},
		{`{"const":1.0000000000000000001}`, `1`, false},
		{`{"const":1.0000000000000000001}`, `1.0000000000000000001`, true},
		{`{"enum":[0.1]}`, `0.1`, true},
		{`{"enum":[0.1]}`, `0.10000000000000000001`, false},
		{`{"enum":[1, 2]}`, `2.0`, true},
		{`{"enum":[-0]}`, `0`, false}, // gojsonschema compares texts: 0 is not -0
		{`{"const":0}`, `-0`, false},
		{`{"const":-0.0}`, `-0`, true},
		{`{"properties":{"a":{"enum":[1,[2,{"b":12345678901234567890}]]}}}`, `{"a":[2,{"b":12345678901234567891}]}`, false},
		{`{"properties":{"a":{"enum":[1,[2,{"b":12345678901234567890}]]}}}`, `{"a":[2,{"b":12345678901234567890}]}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.schema+" "+tt.data, func(t *testing.T) {
			requireVerdict(t, tt.schema, tt.data, tt.valid)
		})
	}
}

// requireVerdict compiles schema, judges data (decoded as encoding/json
// does) with Validate, requires valid to be the verdict, and returns the
// schema and the decoded data for further checks.
func requireVerdict(t *testing.T, schema, data string, valid bool) (*Schema, any) {
	t.Helper()
	s, err := Compile([]byte(schema))
	require.NoError(t, err)
	var v any
	require.NoError(t, json.Unmarshal([]byte(data), &v))
	reason := s.Validate(v, []byte(data))
	require.Equal(t, valid, reason == "", reason)
	return s, v
}

// gojsonschema compares minimum and maximum with the data exactly: a bound
// a double does not hold apart from its neighbours leaves the schema to
// it, or the direct validator, comparing doubles, would admit 0.1 as not
// below 0.10000000000000000001.
func TestSchemaBoundsCompareExactly(t *testing.T) {
	tests := []struct {
		schema, data string
		valid        bool
	}{
		{`{"minimum":0.10000000000000000001}`, `0.1`, false},
		{`{"maximum":0.09999999999999999999}`, `0.1`, false},
		{`{"properties":{"a":{"maximum":1.00000000000000000001}}}`, `{"a":1}`, true},
		{`{"minimum":0.1}`, `0.1`, true},
	}
	for _, tt := range tests {
		t.Run(tt.schema+" "+tt.data, func(t *testing.T) {
			s, v := requireVerdict(t, tt.schema, tt.data, tt.valid)
			require.Equal(t, tt.valid, s.ValidateExact(v, []byte(tt.data)) == "")
		})
	}
}
