package policy

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

// The schema library follows a $ref to an absolute URL: compiling a schema
// (pigeon policy lint, and the broker registering a catalog, which lints
// it first) fetched http(s) URLs and read file:// paths. A catalog under
// review made the linter call internal addresses, and the schema in force
// was whatever that URL served when each node started, not the file a
// reviewer read. A $ref outside the schema's own document is an error, and
// nothing is fetched or read; references within it (#/definitions/x) stay.
func TestSchemaRefsStayInTheSchema(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte(`{"type":"string"}`))
	}))
	defer srv.Close()
	local := filepath.Join(t.TempDir(), "s.json")
	require.NoError(t, os.WriteFile(local, []byte(`{"type":"string"}`), 0o600))

	subject := []byte(`{"name":"a","version":"v1","intents":["x"],"schema":{"name":"s"}}`)
	for _, tc := range []struct{ name, schema string }{
		{"an http URL", `{"$ref":"` + srv.URL + `/s.json"}`},
		{"nested", `{"type":"object","properties":{"a":{"$ref":"` + srv.URL + `/a.json"}}}`},
		{"in an array of schemas", `{"anyOf":[{"type":"null"},{"$ref":"` + srv.URL + `/b.json#/x"}]}`},
		{"relative to an $id", `{"$id":"` + srv.URL + `/base/","properties":{"a":{"$ref":"c.json"}}}`},
		{"a file", `{"$ref":"file://` + local + `"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := fstest.MapFS{
				"subjects/a.json": {Data: subject},
				"schemas/s.json":  {Data: []byte(tc.schema)},
			}
			problems, err := LintFS(fsys)
			require.NoError(t, err)
			requireProblem(t, problems, "schemas/s.json", "", SeverityError, "outside the schema")
			c, err := LoadFS(fsys)
			require.NoError(t, err)
			requireProblem(t, Lint(c), "schemas/s.json", "", SeverityError, "outside the schema")
			require.Zero(t, hits.Load(), "nothing is fetched")
		})
	}
	for _, tc := range []struct{ name, schema string }{
		{"a definition", `{"definitions":{"id":{"type":"string"}},"properties":{"a":{"$ref":"#/definitions/id"}}}`},
		{"the root", `{"type":"object","properties":{"child":{"$ref":"#"}}}`},
		{"a property named $ref", `{"type":"object","properties":{"$ref":{"type":"string"}}}`},
		{"$ref as a value", `{"enum":[{"$ref":"` + srv.URL + `/x"}],"const":{"$ref":"http://x"},"default":{"$ref":"y"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems, err := LintFS(fstest.MapFS{
				"subjects/a.json": {Data: subject},
				"schemas/s.json":  {Data: []byte(tc.schema)},
			})
			require.NoError(t, err)
			require.Empty(t, errorsOnly(problems))
		})
	}
	require.Zero(t, hits.Load())
}
