package pigeon_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestAnAttemptRecordedAfterItsLeaseRanOutIsNotHandedOver: node A leases
// a message (the cluster counts attempt 1) and records the attempt in the
// group's stored progress, but the write is slow, and returns after A's
// lease ran out in the cluster. A handed the message to its consumer all
// the same, with a lease already run out: when node B had taken the
// message over meanwhile, it ran on both nodes at once. A now gives the
// lease up instead (released, its attempt spent), and the message is
// delivered again as the next attempt: to B's consumer after B gives its
// own attempt up, or, when nobody took it over, to the next receive on A.
func TestAnAttemptRecordedAfterItsLeaseRanOutIsNotHandedOver(t *testing.T) {
	for _, tc := range []struct {
		name      string
		takenOver bool // node B leases the message while A's write waits
		next      int  // the attempt the next delivery is
	}{
		{"another node took the lease over", true, 3},
		{"nobody took the lease over", false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := startLateAttempt(t, 3)
			clk, shared, slow, b, id, key, ra, onA := n.clk, n.shared, n.slow, n.b, n.id, n.key, n.ra, n.onA

			// A's write waits past its lease's deadline.
			clk.Advance(2 * dupAckWait)
			rb := dupConnect(t, b, "crew-token", "jobs.run").(pigeon.AttemptSettler)
			var seq uint64
			if tc.takenOver {
				msgs, attempts, err := rb.ReceiveAttempts(context.Background(), "jobs.run", 10)
				require.NoError(t, err)
				require.Len(t, msgs, 1, "node B did not take the message over")
				require.Equal(t, []int{2}, attempts)
				seq = msgs[0].Sequence
			}

			close(slow.proceed)
			awaitOn(t, slow.written, "node A's attempt never reached the store")
			got := awaitOn(t, onA, "node A's receive never returned")
			require.NoError(t, got.err)
			require.Empty(t, got.msgs, "node A's consumer received the message as attempt %v after its lease ran out", got.attempts)

			g, err := shared.LoadGroup(context.Background(), key)
			require.NoError(t, err)
			require.Len(t, g.Attempts, 1)
			for s, n := range g.Attempts {
				seq = s
				require.Equal(t, tc.next-1, n, "the attempts recorded")
			}

			// Delivered again to A as the next attempt: at once when nobody
			// took it over (A's lease was given up), once B's consumer gives
			// its attempt up otherwise.
			if tc.takenOver {
				require.NoError(t, rb.NackAttempt(context.Background(), "jobs.run", id, seq, 2, 0))
			}
			require.Eventually(t, func() bool {
				msgs, attempts, err := ra.ReceiveAttempts(context.Background(), "jobs.run", 10)
				require.NoError(t, err)
				if len(msgs) == 0 {
					return false
				}
				require.Equal(t, []int{tc.next}, attempts)
				require.Equal(t, id, msgs[0].ID)
				return true
			}, 10*time.Second, 5*time.Millisecond, "the message was not delivered again")
		})
	}
}
