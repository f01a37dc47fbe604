package schema

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/xeipuuv/gojsonschema"
)

// exponentialSchema tries both anyOf branches at every level of nested
// arrays: gojsonschema's work doubles with each level.
const exponentialSchema = `{"definitions":{"n":{"anyOf":[{"minItems":3,"items":{"$ref":"#/definitions/n"}},{"items":{"$ref":"#/definitions/n"}}]}},"$ref":"#/definitions/n"}`

// powerSchema chains four recursions, each of which nested arrays can stay
// in (and fail, after validating all below) or leave for the next at any
// level: validations grow with the fourth power of the nesting.
const powerSchema = `{"definitions":{` +
	`"a":{"anyOf":[{"minItems":3,"items":{"$ref":"#/definitions/a"}},{"items":{"$ref":"#/definitions/b"}}]},` +
	`"b":{"anyOf":[{"minItems":3,"items":{"$ref":"#/definitions/b"}},{"items":{"$ref":"#/definitions/c"}}]},` +
	`"c":{"anyOf":[{"minItems":3,"items":{"$ref":"#/definitions/c"}},{"items":{"$ref":"#/definitions/d"}}]},` +
	`"d":{"items":{"$ref":"#/definitions/d"}}},"$ref":"#/definitions/a"}`

// nested is depth arrays, one inside the other.
func nested(depth int) string {
	return strings.Repeat("[", depth) + strings.Repeat("]", depth)
}

// A schema under which one message of a few dozen bytes could cost time
// exponential in its nesting (a $ref cycle reachable in two ways for the
// same data), or endless time (a $ref cycle that never descends into the
// data: the stack overflows, which kills the process), is refused at
// Compile with the schema paths. Recursion that descends one way per data
// value stays allowed.
func TestRecursionBounded(t *testing.T) {
	for _, tc := range []struct{ name, schema, at string }{
		{"anyOf", exponentialSchema, "#/definitions/n"},
		{"oneOf", `{"oneOf":[{"type":"array","items":{"$ref":"#"}},{"items":{"$ref":"#"}}]}`, "#/oneOf/0/items"},
		{"allOf", `{"allOf":[{"items":{"$ref":"#"}},{"items":{"$ref":"#"}}]}`, "#/allOf/0/items"},
		{"allOf beside items", `{"allOf":[{"items":{"$ref":"#"}}],"items":{"$ref":"#"}}`, "#/items"},
		{"not beside items", `{"not":{"not":{"items":{"$ref":"#"}}},"items":{"$ref":"#"}}`, "#/items"},
		{"if then else", `{"if":{"items":{"$ref":"#"}},"then":{"items":{"$ref":"#"}},"else":{"items":{"$ref":"#"}}}`, "#/if/items"},
		{"dependencies", `{"properties":{"a":{"$ref":"#"}},"dependencies":{"a":{"properties":{"a":{"$ref":"#"}}}}}`, "#/properties/a"},
		{"one definition twice", `{"definitions":{"d":{"items":{"$ref":"#"}}},"allOf":[{"$ref":"#/definitions/d"},{"$ref":"#/definitions/d"}]}`, "more than one way"},
		{"properties and patternProperties", `{"properties":{"a":{"$ref":"#"}},"patternProperties":{"^a":{"$ref":"#"}}}`, "#/patternProperties/^a"},
		{"items and contains", `{"items":{"$ref":"#"},"contains":{"$ref":"#"}}`, "#/contains"},
		{"additionalProperties of another branch", `{"anyOf":[{"properties":{"a":{"$ref":"#"}}},{"additionalProperties":{"$ref":"#"}}]}`, "#/anyOf/1/additionalProperties"},
		{"every other level", `{"definitions":{"a":{"items":{"$ref":"#/definitions/b"}},"b":{"anyOf":[{"items":{"$ref":"#/definitions/a"}},{"items":{"$ref":"#/definitions/a"}}]}},"$ref":"#/definitions/a"}`, "#/definitions/b/anyOf/0/items"},
		{"anchors", `{"definitions":{"n":{"$id":"#n","anyOf":[{"items":{"$ref":"#n"}},{"items":{"$ref":"#n"}}]}},"$ref":"#n"}`, "#/definitions/n/anyOf/0/items"},
		{"stay or leave for another recursion", `{"definitions":{"a":{"anyOf":[{"items":{"$ref":"#/definitions/a"}},{"items":{"$ref":"#/definitions/b"}}]},"b":{"items":{"$ref":"#/definitions/b"}}},"$ref":"#/definitions/a"}`, "a power of the data's nesting"},
		{"a chain of such recursions", powerSchema, "a power of the data's nesting"},
		{"beside a $ref", `{"definitions":{"x":{"$ref":"#/definitions/y","foo":{"anyOf":[{"items":{"$ref":"#/definitions/x/foo"}},{"items":{"$ref":"#/definitions/x/foo"}}]}},"y":{}},"$ref":"#/definitions/x/foo"}`, "#/definitions/x/foo/anyOf/0/items"},
		{"$ref to itself", `{"$ref":"#"}`, "without descending"},
		{"anyOf to itself", `{"type":"object","anyOf":[{"$ref":"#"}]}`, "without descending"},
		{"two definitions in a ring", `{"definitions":{"a":{"$ref":"#/definitions/b"},"b":{"not":{"$ref":"#/definitions/a"}}},"$ref":"#/definitions/a"}`, "without descending"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gojsonschema.NewSchema(gojsonschema.NewStringLoader(tc.schema))
			require.NoError(t, err, "the library compiles it")
			_, err = Compile([]byte(tc.schema))
			require.ErrorIs(t, err, ErrRecursion)
			require.ErrorContains(t, err, tc.at)
		})
	}
	for _, tc := range []struct{ name, schema string }{
		{"a tree of items", `{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#"}}}}`},
		{"a binary tree", `{"properties":{"left":{"$ref":"#"},"right":{"$ref":"#"}}}`},
		{"definitions", `{"definitions":{"node":{"type":"array","items":{"$ref":"#/definitions/node"}}},"$ref":"#/definitions/node"}`},
		{"anyOf with one recursive branch", `{"anyOf":[{"type":"string"},{"type":"array","items":{"$ref":"#"}}]}`},
		{"oneOf over different members", `{"oneOf":[{"properties":{"a":{"$ref":"#"}}},{"properties":{"b":{"$ref":"#"}}}]}`},
		{"a pattern that misses the property", `{"properties":{"a":{"$ref":"#"}},"patternProperties":{"^b":{"$ref":"#"}}}`},
		{"additionalProperties beside properties", `{"properties":{"a":{"$ref":"#"}},"additionalProperties":{"$ref":"#"}}`},
		{"tuple items and additionalItems", `{"items":[{"$ref":"#"},{"$ref":"#"}],"additionalItems":{"$ref":"#"}}`},
		{"combinators without recursion", `{"anyOf":[{"items":{"type":"string"}},{"items":{"type":"number"}}],"allOf":[{"minItems":1},{"maxItems":3}]}`},
		{"a tree whose leaves hold another tree", `{"definitions":{"b":{"properties":{"next":{"$ref":"#/definitions/b"}}}},"properties":{"children":{"items":{"$ref":"#"}},"other":{"$ref":"#/definitions/b"}}}`},
		{"a $ref that is not recursive", `{"definitions":{"id":{"type":"string"}},"allOf":[{"$ref":"#/definitions/id"},{"$ref":"#/definitions/id"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile([]byte(tc.schema))
			require.NoError(t, err)
		})
	}
}

// An allowed recursive schema validates data nested 64 levels deep (the
// broker's limit) at one validation per value.
func TestLinearRecursionValidatesDeepData(t *testing.T) {
	sch, err := Compile([]byte(`{"definitions":{"node":{"type":"array","items":{"$ref":"#/definitions/node"}}},"$ref":"#/definitions/node"}`))
	require.NoError(t, err)
	raw := nested(64)
	require.Empty(t, sch.Validate(nil, []byte(raw)))
	require.NotEmpty(t, sch.Validate(nil, []byte(strings.Repeat("[", 63)+"1"+strings.Repeat("]", 63))))
}

// BenchmarkRecursion measures validating nested arrays against the
// exponential schema with the library (what Compile admitted before it
// refused the schema), and against a linear recursive schema that stays
// allowed, and the cost of the check at Compile.
func BenchmarkRecursion(b *testing.B) {
	lib, err := gojsonschema.NewSchema(gojsonschema.NewStringLoader(exponentialSchema))
	require.NoError(b, err)
	for _, depth := range []int{12, 14, 16} {
		raw := nested(depth)
		b.Run("exponential/library/depth="+strconv.Itoa(depth), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = lib.Validate(gojsonschema.NewStringLoader(raw))
			}
		})
	}
	// A chain of recursions each of which the data can stay in or leave at
	// any level: validations grow with the nesting to the power of the
	// chain's length.
	power, err := gojsonschema.NewSchema(gojsonschema.NewStringLoader(powerSchema))
	require.NoError(b, err)
	for _, depth := range []int{16, 32, 64} {
		raw := nested(depth)
		b.Run("power/library/depth="+strconv.Itoa(depth), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = power.Validate(gojsonschema.NewStringLoader(raw))
			}
		})
	}
	b.Run("exponential/compile-refused", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Compile([]byte(exponentialSchema)); err == nil {
				b.Fatal("compiled")
			}
		}
	})
	linear, err := Compile([]byte(`{"definitions":{"node":{"type":"array","items":{"$ref":"#/definitions/node"}}},"$ref":"#/definitions/node"}`))
	require.NoError(b, err)
	for _, depth := range []int{16, 64} {
		raw := []byte(nested(depth))
		b.Run("linear/depth="+strconv.Itoa(depth), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if linear.Validate(nil, raw) != "" {
					b.Fatal("refused")
				}
			}
		})
	}
}

// FuzzRecursionCheck compiles schemas: Compile never panics, and refuses
// a schema for its recursion with the same message every time (the
// policy linter shows it, and a refusal that moved would read as a new
// one).
func FuzzRecursionCheck(f *testing.F) {
	for _, s := range []string{
		exponentialSchema, `{"$ref":"#"}`, `{"properties":{"a":{"$ref":"#"}},"patternProperties":{"a":{"$ref":"#"},"(":{"$ref":"#"}}}`,
		`{"items":[{"$ref":"#/items/1"},{"items":{"$ref":"#/items/0"}}],"additionalItems":{"$ref":"#"}}`,
		`{"definitions":{"a~/b":{"items":{"$ref":"#/definitions/a~0~1b"}}},"$ref":"#/definitions/a%7E0~1b"}`,
		`{"dependencies":{"a":["b"],"b":{"$ref":"#"}},"if":true,"then":false,"contains":{"$ref":"#/dependencies/b"}}`,
		`{"$id":"#x","propertyNames":{"$ref":"#x"},"additionalProperties":{"$ref":"#x"}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, err := Compile([]byte(s))
		if !errors.Is(err, ErrRecursion) {
			return
		}
		_, again := Compile([]byte(s))
		require.EqualError(t, again, err.Error())
	})
}
