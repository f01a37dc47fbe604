// Package audittest reads, for tests, the audit records an engine wrote.
package audittest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// BoundRefusals returns e's audit records of event ev and code, in log
// order, requiring each to be a refusal no gate of the engine judged (an
// outcome deny without a gate): the record of a bound of a server's own,
// a transport's or the HTTP server's. A run of coalesced refusals shows
// its count only once its window has closed: advance the engine's clock
// first.
func BoundRefusals(t testing.TB, e *pigeon.Engine, ev pigeon.Event, code pigeon.Code) []pigeon.AuditRecord {
	t.Helper()
	recs, err := e.Audit(context.Background(), 0, 0)
	require.NoError(t, err)
	var out []pigeon.AuditRecord
	for _, r := range recs {
		if r.Type != string(ev) || r.Code != string(code) {
			continue
		}
		require.Equal(t, string(pigeon.OutcomeDeny), r.Outcome)
		require.Empty(t, r.Gate, "no gate of the engine judged it")
		out = append(out, r)
	}
	return out
}

// Refs returns the Refs of recs, in order.
func Refs(recs []pigeon.AuditRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Ref
	}
	return out
}
