package policy

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

// schemaCatalog is a catalog of one subject whose schema is schema.
func schemaCatalog(schema string) fstest.MapFS {
	return fstest.MapFS{
		"subjects/a.json": {Data: []byte(`{"name":"a","version":"v1","intents":["x"],"schema":{"name":"s"}}`)},
		"schemas/s.json":  {Data: []byte(schema)},
	}
}

// A schema under which one message of a few dozen bytes costs time
// exponential in its nesting (a $ref cycle two anyOf branches both take:
// 0.1 s at 16 levels, hours at the 64 data may have), or recurses until
// the stack overflows and the broker dies ({"$ref":"#"}), is a lint
// error naming the schema paths, so the broker refuses the catalog. A
// recursive schema that descends one way per data value stays allowed.
func TestSchemaRecursionLint(t *testing.T) {
	for _, tc := range []struct{ name, schema, msg string }{
		{"anyOf over a recursive $ref",
			`{"definitions":{"n":{"anyOf":[{"minItems":3,"items":{"$ref":"#/definitions/n"}},{"items":{"$ref":"#/definitions/n"}}]}},"$ref":"#/definitions/n"}`,
			"#/definitions/n/anyOf/0/items and #/definitions/n/anyOf/1/items"},
		{"oneOf over the root", `{"oneOf":[{"type":"array","items":{"$ref":"#"}},{"items":{"$ref":"#"}}]}`, "exponential in the data's nesting"},
		{"properties and patternProperties", `{"properties":{"a":{"$ref":"#"}},"patternProperties":{"a":{"$ref":"#"}}}`, "#/properties/a"},
		{"a recursion the data can stay in or leave", `{"definitions":{"a":{"anyOf":[{"items":{"$ref":"#/definitions/a"}},{"items":{"$ref":"#/definitions/b"}}]},"b":{"items":{"$ref":"#/definitions/b"}}},"$ref":"#/definitions/a"}`, "a power of the data's nesting"},
		{"a $ref to itself", `{"$ref":"#"}`, "would never end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems, err := LintFS(schemaCatalog(tc.schema))
			require.NoError(t, err)
			requireProblem(t, problems, "schemas/s.json", "", SeverityError, `schema "s" is refused: `)
			requireProblem(t, problems, "schemas/s.json", "", SeverityError, tc.msg)
			c, err := LoadFS(schemaCatalog(tc.schema))
			require.NoError(t, err)
			requireProblem(t, Lint(c), "schemas/s.json", "", SeverityError, tc.msg)
		})
	}
	for _, tc := range []struct{ name, schema string }{
		{"a tree", `{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#"}}}}`},
		{"a binary tree", `{"properties":{"left":{"$ref":"#"},"right":{"$ref":"#"}}}`},
		{"a definition", `{"definitions":{"node":{"type":"array","items":{"$ref":"#/definitions/node"}}},"$ref":"#/definitions/node"}`},
		{"anyOf with one recursive branch", `{"anyOf":[{"type":"string"},{"type":"array","items":{"$ref":"#"}}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems, err := LintFS(schemaCatalog(tc.schema))
			require.NoError(t, err)
			require.Empty(t, errorsOnly(problems))
		})
	}
}

// format: "regex" parses every data string there as a regular expression,
// a cost a sender scales with the message (up to a few hundred bytes of
// memory per byte): a lint warning naming where. "format" as a property
// name, or "regex" as data, is no such check.
func TestSchemaRegexFormatLint(t *testing.T) {
	problems, err := LintFS(schemaCatalog(`{"type":"object","properties":{"p":{"type":"array","items":{"format":"regex"}}}}`))
	require.NoError(t, err)
	require.Empty(t, errorsOnly(problems))
	requireProblem(t, problems, "schemas/s.json", "", SeverityWarning, `format "regex" at #/properties/p/items`)
	for _, s := range []string{
		`{"type":"string","format":"email"}`,
		`{"properties":{"format":{"const":"regex"}}}`,
		`{"properties":{"format":{"enum":["regex"]}},"default":{"format":"regex"}}`,
		`{"enum":[{"format":"regex"}]}`,
	} {
		problems, err := LintFS(schemaCatalog(s))
		require.NoError(t, err)
		for _, p := range problems {
			require.False(t, strings.Contains(p.Message, "regular expression"), "%s: %s", s, p)
		}
	}
}
