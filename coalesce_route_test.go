package pigeon_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// TestAccessDeniedSummaryKeepsTheRoute: a principal's access.denied
// refusals are one run whatever route they name, and the run's record
// said only how many it stood for ("coalesced:N"): a POST /v1/grants
// probe made inside a second that began with GET /v1/audit was recorded
// as a count, the route it tried lost. The record now names the latest
// refusal's route after the count, as auth.failed's names its source.
func TestAccessDeniedSummaryKeepsTheRoute(t *testing.T) {
	cases := []struct {
		name   string
		routes []string // refused within one second, the first written in full
		want   string   // the run's record
	}{
		{"one probe", []string{"GET /v1/audit", "POST /v1/grants"}, "coalesced:1 last:POST /v1/grants"},
		{"the latest of many", []string{"GET /v1/audit", "GET /v1/roles", "DELETE /v1/grants/{jti}", "POST /v1/grants"}, "coalesced:3 (refs differ) last:POST /v1/grants"},
		{"a route cut to the bound", []string{"GET /v1/audit", "GET /" + strings.Repeat("x", 600)}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			for _, route := range c.routes {
				require.NoError(t, f.e.Record(ctx, pigeon.EventAccessDenied, pigeon.CodeForbidden, pigeon.AuditRecord{Principal: demo.Orders, Ref: route}))
			}
			f.clock.Advance(2 * time.Second) // the run's second is over
			recs := auditOf(t, f.e, pigeon.EventAccessDenied)
			require.Len(t, recs, 2, "the first refusal in full, one record for the rest")
			require.Equal(t, c.routes[0], recs[0].Ref)
			require.Equal(t, demo.Orders, recs[1].Principal)
			require.Equal(t, string(pigeon.CodeForbidden), recs[1].Code)
			if c.want != "" {
				require.Equal(t, c.want, recs[1].Ref)
				return
			}
			// A route longer than a record keeps is cut, marked, and the
			// record stays within the bound.
			require.True(t, strings.HasPrefix(recs[1].Ref, "coalesced:1 last:GET /xxx"), recs[1].Ref)
			require.LessOrEqual(t, len(recs[1].Ref), 512, "an audit record keeps 512 bytes of a text")
			require.Contains(t, recs[1].Ref, "(cut from ")
		})
	}
}
