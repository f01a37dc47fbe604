package pigeon

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Negotiating and revoking in a loop keeps the per-principal bookkeeping
// proportional to the live contracts, not to every contract ever issued.
func TestLiveContractsStayBounded(t *testing.T) {
	l := liveContracts{by: map[string]*principalLive{}}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for i := range 10000 {
		id := strconv.Itoa(i)
		require.True(t, l.reserve("p", id, now.Add(time.Hour), now, 5))
		l.release("p", id)
	}
	require.Empty(t, l.by, "nothing live, nothing kept")
	for i := range 5 {
		require.True(t, l.reserve("p", strconv.Itoa(i), now.Add(time.Duration(i+1)*time.Minute), now, 5))
	}
	require.False(t, l.reserve("p", "x", now.Add(time.Hour), now, 5))
	for i := 5; i < 10000; i++ {
		id := strconv.Itoa(i)
		l.release("p", strconv.Itoa(i-5))
		require.True(t, l.reserve("p", id, now.Add(time.Hour), now, 5))
	}
	require.Len(t, l.by["p"].live, 5)
	require.LessOrEqual(t, len(l.by["p"].exp), 2*5+32+1)
	l.sweep(now.Add(2 * time.Hour))
	require.Empty(t, l.by)
}
