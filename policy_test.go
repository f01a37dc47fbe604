package pigeon

import (
	"context"
	"errors"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"pigeon/policy"
)

// New and Engine.LoadCatalog refuse a catalog that Lint reports errors for,
// even one that compiles; warnings do not stop it.
func TestBrokerRefusesCatalogWithLintErrors(t *testing.T) {
	ctx := context.Background()
	// The demo catalog, in JSON, and the same in YAML.
	for _, dir := range []string{"demo/policies", "policy/testdata/yaml-policies"} {
		c, err := policy.LoadDir(dir)
		require.NoError(t, err)
		e, err := New(ctx, &Options{Catalog: c})
		require.NoError(t, err, "%s loads", dir)
		require.NoError(t, e.Shutdown(ctx))
	}

	// Two data-quality rules named r: compile accepts it, Lint does not.
	subject := `{"name":"a.b","version":"v1","mode":"pubsub","intents":["x"],
		"rules":[{"name":"r","expr":"true"},{"name":"r","expr":"true"}]}`
	c, err := policy.LoadFS(fstest.MapFS{"subjects/a.b.json": {Data: []byte(subject)}})
	require.NoError(t, err)
	_, err = compileSubject(c.Subjects[0], c.Schemas)
	require.NoError(t, err, "compile alone does not catch it")
	_, err = New(ctx, &Options{Catalog: c})
	require.Equal(t, CodePolicyInvalid, ErrorCode(err), "%v", err)
	require.ErrorContains(t, err, "subjects/a.b.json: rules[1].name: error: rule name \"r\" is used twice")
	var pe *Error
	require.True(t, errors.As(err, &pe))
	require.Equal(t, "subjects/a.b.json", pe.Details["file"])
	require.Equal(t, "rules[1].name", pe.Details["field"])

	// The same through LoadCatalog and ReplaceSubject on a running engine:
	// nothing changes.
	e, err := New(ctx, nil)
	require.NoError(t, err)
	defer e.Shutdown(ctx)
	require.Equal(t, CodePolicyInvalid, ErrorCode(e.LoadCatalog(ctx, c)))
	require.Equal(t, CodePolicyInvalid, ErrorCode(e.ReplaceSubject(ctx, c.Subjects[0])))
	require.Empty(t, e.Subjects())
	bad := c.Subjects[0]
	bad.Rules = nil
	bad.Intents = []string{"x", " "}
	err = e.ReplaceSubject(ctx, bad)
	require.ErrorContains(t, err, "subject a.b: intents[1]: error: entry is empty")

	// A subject that refers to a schema loaded before still lints.
	ref, err := policy.LoadDir("demo/policies")
	require.NoError(t, err)
	require.NoError(t, e.LoadCatalog(ctx, ref))
	require.NoError(t, e.ReplaceSubject(ctx, ref.Subjects[0]))
}
