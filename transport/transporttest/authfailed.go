package transporttest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// AuthFailed returns the refs of e's auth.failed audit records of code, in
// order, and fails t when any of secrets (the tokens and guesses a test
// sent) appears anywhere in the audit log: a refused credential is never
// written.
func AuthFailed(t testing.TB, e *pigeon.Engine, code pigeon.Code, secrets ...string) []string {
	t.Helper()
	recs, err := e.Audit(context.Background(), 0, 0)
	require.NoError(t, err)
	b, err := json.Marshal(recs)
	require.NoError(t, err)
	for _, s := range secrets {
		require.NotContains(t, string(b), s, "the audit log holds a credential")
	}
	var refs []string
	for _, r := range recs {
		if r.Type == string(pigeon.EventAuthFailed) && r.Code == string(code) {
			refs = append(refs, r.Ref)
		}
	}
	return refs
}
