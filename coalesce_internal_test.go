package pigeon

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// At most maxCoalescing runs are counted at once; a refusal beyond them
// is written in full, every time, rather than forgotten or stored without
// bound. flush ends the runs whose window closed and summarizes only those
// that counted something.
func TestCoalescerIsBounded(t *testing.T) {
	var c coalescer
	at := time.Unix(1000, 0)
	refusal := func(principal string) *store.AuditRecord {
		r := EventPublishDenied.record(OutcomeDeny, CodeRateLimited, store.AuditRecord{Time: at, Principal: principal, Subject: "s", Gate: GateRate})
		return &r
	}
	for i := range maxCoalescing {
		write, ended := c.admit(refusal("p" + strconv.Itoa(i)))
		require.True(t, write)
		require.Nil(t, ended)
	}
	for range 3 {
		write, ended := c.admit(refusal("one-too-many"))
		require.True(t, write, "beyond the bound every refusal is written")
		require.Nil(t, ended)
	}
	require.Len(t, c.runs, maxCoalescing)

	write, _ := c.admit(refusal("p7"))
	require.False(t, write, "a run within its window counts")
	require.Empty(t, c.flush(at.Add(coalesceWindow/2)), "no window has closed")
	sums := c.flush(at.Add(coalesceWindow))
	require.Len(t, sums, 1, "only the run that counted is summarized")
	require.Equal(t, "p7", sums[0].Principal)
	require.Equal(t, coalescedRef+"1", sums[0].Ref)
	require.Empty(t, c.runs, "every closed run ended")

	ok := EventPublishDenied.record(OutcomeDeny, CodeIntentDenied, store.AuditRecord{Time: at, Principal: "p"})
	for range 3 {
		write, _ := c.admit(&ok)
		require.True(t, write, "other codes are never counted")
	}
	require.Empty(t, c.runs)
}
