package pigeon

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// The schema gate's direct validator read numbers as the decoded double,
// not as the stored text a receiver gets: 100.0000000000000001 passed
// "maximum": 100, 1.0000000000000001 passed "type": "integer",
// 9007199254740993 passed "maximum": 9007199254740992, where
// the reference validator, which reads the text exactly, refuses each.
// The gate must judge what is stored.
func TestSchemaJudgesNumbersAsStored(t *testing.T) {
	const sch = `{"type":"object","properties":{
		"qty":{"type":"integer","minimum":0,"maximum":100},
		"big":{"type":"integer","maximum":9007199254740992},
		"one":{"enum":[1]},
		"half":{"const":2.5}}}`
	s, err := compileSubject(SubjectPolicy{Name: "t", Version: "v1", Schema: &SchemaRef{Name: "s"}},
		map[string][]byte{"s": []byte(sch)})
	require.NoError(t, err)
	tests := []struct {
		data  string
		valid bool
	}{
		{`{"qty":100}`, true},
		{`{"qty":100.0}`, true}, // 100.0 is the integer 100
		{`{"qty":1e2}`, true},
		{`{"qty":100.0000000000000001}`, false},
		{`{"qty":1.0000000000000001}`, false},
		{`{"qty":-0.00000000000000000001}`, false},
		{`{"big":9007199254740992}`, true},
		{`{"big":9007199254740993}`, false},
		{`{"one":1}`, true},
		{`{"one":1.0}`, true},
		// gojsonschema compares enum and const members as doubles, so
		// these passed "enum": [1] and "const": 2.5.
		{`{"one":1.0000000000000001}`, false},
		{`{"one":0.99999999999999999}`, false},
		{`{"half":2.5000000000000000001}`, false},
		{`{"half":2.5}`, true},
		// An inexact number elsewhere is judged as before.
		{`{"one":1,"note":0.12345678901234567}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.data, func(t *testing.T) {
			v, err := decodeValue([]byte(tt.data))
			require.NoError(t, err)
			a := &Admission{subj: s, Data: v, Message: &Message{Data: json.RawMessage(tt.data)}}
			verdict := schemaGate{}.Check(context.Background(), a)
			if tt.valid {
				require.True(t, verdict.Allowed(), verdict.Reason)
			} else {
				require.Equal(t, CodeSchemaInvalid, verdict.Code)
			}
		})
	}
}
