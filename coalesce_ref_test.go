package pigeon_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// TestCoalescedSummaryNamesTheLatestRef: a run of refusals of one event,
// principal, subject and code spans every Ref its refusals carry (a
// transport's RATE_LIMITED refusals of a connection's publish rate, its
// requests in flight and its principal's request bytes share one run; so
// do reads refused by a server's read pool and by a principal's share of
// it), and the run's record said only how many it stood for
// ("coalesced:N") for every event but access.denied and auth.failed: the
// bound refused at inside a run was lost. The record now names the
// latest refusal's Ref after "last:", preceded by "(refs differ)" when
// the refusals it stands for did not all carry that Ref.
func TestCoalescedSummaryNamesTheLatestRef(t *testing.T) {
	cases := []struct {
		name string
		ev   pigeon.Event
		refs []string // refused within one second, the first written in full
		want string   // the run's record
	}{
		{"one ref", pigeon.EventPublishDenied,
			[]string{"ws request bytes", "ws request bytes", "ws request bytes"},
			"coalesced:2 last:ws request bytes"},
		{"two refs, the latest named", pigeon.EventPublishDenied,
			[]string{"ws publish connection rate", "ws request in flight", "ws request bytes"},
			"coalesced:2 (refs differ) last:ws request bytes"},
		{"the first written apart, the rest at one place", pigeon.EventPublishDenied,
			[]string{"ws publish connection rate", "POST /v1/requests request bytes", "POST /v1/requests request bytes"},
			"coalesced:2 last:POST /v1/requests request bytes"},
		{"a read refused by the pool, then by the share", pigeon.EventReceiveDenied,
			[]string{"ws receive read budget", "POST /v1/subjects/{name}/receive read budget", "ws receive read budget"},
			"coalesced:2 (refs differ) last:ws receive read budget"},
		{"a ref among none", pigeon.EventReplayDenied,
			[]string{"", "", "ws replay read budget"},
			"coalesced:2 (refs differ) last:ws replay read budget"},
		{"no ref", pigeon.EventPublishDenied,
			[]string{"", "", ""},
			"coalesced:2"},
		{"the latest without one", pigeon.EventPublishDenied,
			[]string{"", "ws request bytes", ""},
			"coalesced:2 (refs differ)"},
		// A Ref is held to auditText before it is counted: one holding a
		// control or formatting character is kept quoted in the summary
		// as in the record written in full, and a Ref that reads like the
		// mark is still the Ref, after "last:".
		{"a control character quoted", pigeon.EventPublishDenied,
			[]string{"a", "\x1b[2Jws request bytes", "\x1b[2Jws request bytes"},
			`coalesced:2 last:"\x1b[2Jws request bytes"`},
		{"a formatting character quoted", pigeon.EventReplayDenied,
			[]string{"a", "b", "audit \u202etxt.exe"},
			`coalesced:2 (refs differ) last:"audit \u202etxt.exe"`},
		{"a ref like the mark", pigeon.EventReplayDenied,
			[]string{"a", "(refs differ) last:x", "(refs differ) last:x"},
			"coalesced:2 last:(refs differ) last:x"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			for _, ref := range c.refs {
				require.NoError(t, f.e.Record(ctx, c.ev, pigeon.CodeRateLimited, pigeon.AuditRecord{Principal: demo.Orders, Ref: ref}))
			}
			f.clock.Advance(2 * time.Second) // the run's second is over
			recs := auditOf(t, f.e, c.ev)
			require.Len(t, recs, 2, "the first refusal in full, one record for the rest")
			require.Equal(t, demo.Orders, recs[1].Principal)
			require.Equal(t, string(pigeon.CodeRateLimited), recs[1].Code)
			require.Equal(t, c.want, recs[1].Ref)
		})
	}
}

// TestCoalescedSummaryMarkSurvivesTheBound: a summary whose latest Ref is
// as long as a record keeps is cut to the bound at its end, marked, so
// the count and "(refs differ)" before the Ref are kept.
func TestCoalescedSummaryMarkSurvivesTheBound(t *testing.T) {
	f := newFixture(t)
	long := "GET /" + strings.Repeat("x", 600)
	for _, ref := range []string{"a", "b", long} {
		require.NoError(t, f.e.Record(ctx, pigeon.EventPublishDenied, pigeon.CodeRateLimited, pigeon.AuditRecord{Principal: demo.Orders, Ref: ref}))
	}
	f.clock.Advance(2 * time.Second)
	recs := auditOf(t, f.e, pigeon.EventPublishDenied)
	require.Len(t, recs, 2)
	sum := recs[1].Ref
	require.True(t, strings.HasPrefix(sum, "coalesced:2 (refs differ) last:GET /xxx"), sum)
	require.LessOrEqual(t, len(sum), 512, "an audit record keeps 512 bytes of a text")
	require.Contains(t, sum, "(cut from ")
}
