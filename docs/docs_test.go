package docs_test

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"pigeon/docs"
)

// openAPIMetaSchema compiles the OpenAPI 3.1 schema of the specification
// (testdata/openapi-3.1.schema.json).
func openAPIMetaSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open("testdata/openapi-3.1.schema.json")
	require.NoError(t, err)
	defer f.Close()
	meta, err := jsonschema.UnmarshalJSON(f)
	require.NoError(t, err)
	const id = "https://spec.openapis.org/oas/3.1/schema/2022-10-07"
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource(id, meta))
	s, err := c.Compile(id)
	require.NoError(t, err)
	return s
}

// TestOpenAPIValidates checks openapi.yaml against the OpenAPI 3.1 schema
// of the specification (testdata/openapi-3.1.schema.json, 2022-10-07, as
// published by the OpenAPI Initiative, Apache-2.0). That schema checks the
// document's structure, not the JSON Schemas inside it (the specification
// leaves them to the dialect); the walk after it checks that every $ref
// resolves.
func TestOpenAPIValidates(t *testing.T) {
	s := openAPIMetaSchema(t)
	doc := openAPIAsJSON(t, docs.OpenAPI())
	require.NoError(t, s.Validate(doc))

	// Every $ref points at something the document defines.
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				require.True(t, resolves(doc, ref), "unresolved $ref %s", ref)
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(doc)
}

// TestOpenAPIValidatorRejects: a broken document fails (so the check above
// means something).
func TestOpenAPIValidatorRejects(t *testing.T) {
	s := openAPIMetaSchema(t)
	bad := openAPIAsJSON(t, []byte("openapi: 3.1.0\ninfo: {title: x, version: '1'}\npaths:\n  /x:\n    get:\n      responses:\n        '200': {}\n"))
	require.Error(t, s.Validate(bad), "a response without a description")
}

// openAPIAsJSON decodes YAML into the JSON data model the validator reads.
func openAPIAsJSON(t *testing.T, y []byte) any {
	t.Helper()
	var v any
	require.NoError(t, yaml.Unmarshal(y, &v))
	b, err := json.Marshal(v)
	require.NoError(t, err)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	require.NoError(t, err)
	return doc
}

// resolves reports whether the local reference ref ("#/a/b") names a
// member of doc.
func resolves(doc any, ref string) bool {
	if len(ref) < 2 || ref[:2] != "#/" {
		return false
	}
	cur := doc
	for _, part := range bytes.Split([]byte(ref[2:]), []byte("/")) {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[string(part)]; !ok {
			return false
		}
	}
	return true
}

// TestOpenAPICodesMatchErrors: the Code enum of openapi.yaml lists exactly
// the codes errors.go declares, so a new code needs its line there.
func TestOpenAPICodesMatchErrors(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../errors.go", nil, 0)
	require.NoError(t, err)
	var declared []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "Code" {
				continue
			}
			for _, val := range v.Values {
				if lit, ok := val.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					if s != "" { // CodeOK is no error
						declared = append(declared, s)
					}
				}
			}
		}
	}
	require.NotEmpty(t, declared)
	var d struct {
		Components struct {
			Schemas struct {
				Code struct {
					Enum []string `yaml:"enum"`
				} `yaml:"Code"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(docs.OpenAPI(), &d))
	require.ElementsMatch(t, declared, d.Components.Schemas.Code.Enum, "components.schemas.Code.enum of openapi.yaml against errors.go")
}
