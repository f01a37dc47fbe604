package pigeon_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// inFlight is GroupStats.InFlight of subject's default group on e.
func inFlight(t *testing.T, e *pigeon.Engine, subject string) int {
	t.Helper()
	st, err := e.Stats(context.Background())
	require.NoError(t, err)
	for _, g := range st.Groups {
		if g.Subject == subject && g.Group == pigeon.DefaultGroup {
			return g.InFlight
		}
	}
	t.Fatalf("no group of %s in Stats", subject)
	return 0
}

// TestStatsInFlightCountsHeldLeases: GroupStats.InFlight counts the
// leases a consumer of the node holds. It counted every lease the group
// kept in memory: a message nacked with a delay (its lease freed, kept
// for its due time) and a message another node leased (kept for when
// that node's lease ends) counted as in flight, though no consumer here
// held either.
func TestStatsInFlightCountsHeldLeases(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// run leaves leases in the default group of jobs.run and returns
		// the engine whose Stats it reads, with the leases it holds.
		run func(t *testing.T) (*pigeon.Engine, int)
	}{
		{"nacked with a delay", func(t *testing.T) (*pigeon.Engine, int) {
			e := dupEngine(t)
			publishN(t, dupConnect(t, e, "boss-token", "jobs.run"), dupCases[0], 0, 3)
			crew := dupConnect(t, e, "crew-token", "jobs.run")
			msgs, err := crew.Receive(ctx, "jobs.run", 3)
			require.NoError(t, err)
			require.Len(t, msgs, 3)
			require.Equal(t, 3, inFlight(t, e, "jobs.run"), "three leases held")
			require.NoError(t, crew.Nack(ctx, "jobs.run", msgs[0].ID, time.Hour))
			require.NoError(t, crew.Ack(ctx, "jobs.run", msgs[1].ID))
			return e, 1
		}},
		{"leased by another node", func(t *testing.T) (*pigeon.Engine, int) {
			_, es := twoNodes(t)
			publishN(t, dupConnect(t, es[0], "boss-token", "jobs.run"), dupCases[0], 0, 1)
			msgs, err := dupConnect(t, es[0], "crew-token", "jobs.run").Receive(ctx, "jobs.run", 1)
			require.NoError(t, err)
			require.Len(t, msgs, 1)
			require.Equal(t, 1, inFlight(t, es[0], "jobs.run"), "the lease node A holds")
			msgs, err = dupConnect(t, es[1], "crew-token", "jobs.run").Receive(ctx, "jobs.run", 1)
			require.NoError(t, err)
			require.Empty(t, msgs, "node A's lease holds")
			return es[1], 0
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, want := tc.run(t)
			require.Equal(t, want, inFlight(t, e, "jobs.run"))
		})
	}
}
