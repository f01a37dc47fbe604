package pigeon

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestCoalescerRunEndsWhenTheClockStepsBack: a run's window is the second
// after its first refusal. A refusal timed before that (the wall clock
// stepped back an hour, or a record timed ahead of it started the run)
// was read as within the window, counted rather than written, and the
// sweep did not flush the run either, so for the hour of the step the log
// held nothing of the run past its first refusal (and a crash lost the
// count). Such a refusal ends the run: the summary first, then it.
func TestCoalescerRunEndsWhenTheClockStepsBack(t *testing.T) {
	for _, tc := range []struct {
		name          string
		first, second time.Time // the run's first refusal, the next ones
	}{
		{"the clock stepped back", time.Unix(10_000, 0), time.Unix(10_000-3600, 0)},
		{"a first refusal timed far ahead", time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC), time.Unix(10_000, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c coalescer
			refusal := func(at time.Time) *store.AuditRecord {
				r := EventPublishDenied.record(OutcomeDeny, CodeRateLimited, store.AuditRecord{Time: at, Principal: "p", Subject: "s", Gate: GateRate})
				return &r
			}
			write, _ := c.admit(refusal(tc.first))
			require.True(t, write)
			write, ended := c.admit(refusal(tc.second))
			require.True(t, write, "a refusal before the run's start is not within its window")
			require.Nil(t, ended, "nothing counted yet")
			write, _ = c.admit(refusal(tc.second.Add(time.Millisecond)))
			require.False(t, write, "the new run counts from the stepped clock")
			sums := c.flush(tc.second.Add(2 * coalesceWindow))
			require.Len(t, sums, 1, "the sweep ends it by the stepped clock")
			require.Equal(t, coalescedRef+"1", sums[0].Ref)

			// A sweep whose clock stepped back ends the runs it finds.
			write, _ = c.admit(refusal(tc.first))
			require.True(t, write)
			write, _ = c.admit(refusal(tc.first.Add(time.Millisecond)))
			require.False(t, write)
			require.Len(t, c.flush(tc.first.Add(-time.Hour)), 1)
			require.Empty(t, c.runs)
		})
	}
}
