package policy

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

// A YAML schema's mapping keys become JSON member names. YAML reads an
// unquoted 1, 0x1, 1.0, true, True, ~ or null as a number, boolean or
// null, which the conversion to JSON respelled (null as "<nil>", 0x1F as
// "31") and merged (1 and 0x1 are one key: the last won). Such keys are
// refused; quoted, they are names as written.
func TestYAMLSchemaKeysAreNames(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"two spellings of one number", "type: object\nproperties:\n  1: {type: string}\n  0x1: {type: integer}\n", "line 3"},
		{"two spellings of true", "type: object\nproperties:\n  true: {type: string}\n  True: {type: integer}\n", "line 3"},
		{"null", "type: object\nproperties:\n  null: {type: string, maxLength: 0}\n", "line 3"},
		{"hexadecimal", "type: object\nproperties:\n  0x1F: {type: string}\n", "line 3"},
		{"float", "type: object\nproperties:\n  1.0: {type: string}\n", "line 3"},
		{"nested under an array", "anyOf:\n  - properties:\n      2: {const: 1}\n", "line 3"},
		{"an alias to a number", "x: &n 5\nproperties:\n  *n : {type: string}\n", "line 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseSchema("schemas/s.yaml", []byte(tc.body))
			require.ErrorContains(t, err, "schemas/s.yaml")
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "quote it")

			_, err = LoadFS(fstest.MapFS{
				"subjects/a.yaml": {Data: []byte("name: a\nversion: v1\nintents: [x]\nschema: {name: s}\n")},
				"schemas/s.yaml":  {Data: []byte(tc.body)},
			})
			require.ErrorContains(t, err, "quote it")
		})
	}
	for _, tc := range []struct {
		name, body, want string
	}{
		{"quoted numbers", "type: object\nproperties:\n  \"1\": {type: string}\n  '0x1': {type: integer}\n",
			`{"properties":{"0x1":{"type":"integer"},"1":{"type":"string"}},"type":"object"}`},
		{"quoted null", "properties:\n  \"null\": {type: string}\n", `{"properties":{"null":{"type":"string"}}}`},
		{"a merge key", "base: &b {type: string}\nproperties:\n  a:\n    <<: *b\n    maxLength: 3\n",
			`{"base":{"type":"string"},"properties":{"a":{"maxLength":3,"type":"string"}}}`},
		{"numbers as values", "const: 0x10\nenum: [1, true, null]\n", `{"const":16,"enum":[1,true,null]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js, err := parseSchema("schemas/s.yaml", []byte(tc.body))
			require.NoError(t, err)
			require.JSONEq(t, tc.want, string(js))
		})
	}
}

// A JSON member named as a field in another case is a load error; in YAML
// it was an unknown field, a warning, so "ForbiddenFields: [card.pan]" left
// the forbidden list empty while a reviewer read it as set. YAML refuses
// it too, at any depth.
func TestYAMLFieldInAnotherCaseIsRefused(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"a data setting", "name: a\nversion: v1\ndata:\n  ForbiddenFields: [card.pan]\n",
			`member "data.ForbiddenFields" differs from "forbiddenFields" only in case`},
		{"the name", "Name: a\nversion: v1\n", `member "Name" differs from "name" only in case`},
		{"in a rule", "name: a\npolicy:\n  publish:\n    - effect: allow\n      Principals: [spiffe://x/a]\n",
			`member "policy.publish[0].Principals" differs from "principals" only in case`},
		{"integrity", "name: a\nintegrity:\n  SIGNATURE: required\n",
			`member "integrity.SIGNATURE" differs from "signature" only in case`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSubject("subjects/a.yaml", []byte(tc.body))
			require.ErrorContains(t, err, "subjects/a.yaml: ")
			require.ErrorContains(t, err, tc.want)
			_, err = LoadFS(fstest.MapFS{"subjects/a.yaml": {Data: []byte(tc.body)}})
			require.ErrorContains(t, err, tc.want)
		})
	}
	// Unknown fields that are no field in another case stay warnings, and
	// map keys (attributes) are names, not fields.
	_, err := ParseSubject("subjects/a.yaml", []byte("name: a\nversion: v1\nfuture: 1\npolicy:\n  publish:\n    - effect: allow\n      attributes: {Team: ops, team: dev}\n"))
	require.NoError(t, err)
}
