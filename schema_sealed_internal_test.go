package pigeon

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSchemaJudgesSealedClearFieldsAsStored: on a subject sealed end to
// end, the schema gate validates the clear (routing) fields only, and it
// built their text by encoding the decoded doubles again: 100.0000000000000001
// became 100 and passed "maximum": 100, 9007199254740993 became
// 9007199254740992, 1.0000000000000001 became 1 and passed "type":
// "integer", while the store keeps, and receivers read, the
// text as published. The clear part is now judged from the published
// text, as data of a subject that is not sealed is
// (TestSchemaJudgesNumbersAsStored).
func TestSchemaJudgesSealedClearFieldsAsStored(t *testing.T) {
	const sch = `{"type":"object","properties":{
		"qty":{"type":"integer","minimum":0,"maximum":100},
		"big":{"type":"integer","maximum":9007199254740992},
		"one":{"enum":[1]}}}`
	s, err := compileSubject(SubjectPolicy{Name: "t", Version: "v1", Schema: &SchemaRef{Name: "s"},
		Data: DataPolicy{Encryption: "required", RoutingFields: []string{"qty", "big", "one"}}},
		map[string][]byte{"s": []byte(sch)})
	require.NoError(t, err)
	require.True(t, s.e2e)
	const sealed = `"sealed":{"v":1,"anything":"opaque to the schema"}`
	for _, tt := range []struct {
		clear string
		valid bool
	}{
		{`"qty":100`, true},
		{`"qty":1e2`, true},
		{`"qty":100.0000000000000001`, false},
		{`"qty":1.0000000000000001`, false},
		{`"qty":-0.00000000000000000001`, false},
		{`"big":9007199254740992`, true},
		{`"big":9007199254740993`, false},
		{`"one":1`, true},
		{`"one":1.0000000000000001`, false},
		{`"qty":101`, false},
		{`"qty":"7"`, false},
	} {
		for _, data := range []string{`{` + tt.clear + `,` + sealed + `}`, `{` + sealed + `,` + tt.clear + `}`} {
			t.Run(data, func(t *testing.T) {
				doc, err := decodeValue([]byte(data))
				require.NoError(t, err)
				a := &Admission{subj: s, Data: doc, Message: &Message{Data: json.RawMessage(data)}}
				v := schemaGate{}.Check(context.Background(), a)
				if tt.valid {
					require.True(t, v.Allowed(), v.Reason)
				} else {
					require.Equal(t, CodeSchemaInvalid, v.Code)
				}
			})
		}
	}
}
