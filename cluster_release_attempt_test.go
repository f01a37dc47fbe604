package pigeon_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
)

// lateRelease is a hub node whose first release that is not done runs
// stall before it reaches the hub, as a release the engine sends once it
// let go of the group's lock can be overtaken by what the node does
// meanwhile; sent is closed once that release was answered.
type lateRelease struct {
	*hubNode
	once  sync.Once
	stall func()
	sent  chan struct{}
}

func (n *lateRelease) Release(ctx context.Context, key store.GroupKey, seq uint64, attempt int, done bool, retryAt time.Time) error {
	first := false
	if !done {
		n.once.Do(func() { first = true })
	}
	if !first {
		return n.hubNode.Release(ctx, key, seq, attempt, done, retryAt)
	}
	n.stall()
	defer close(n.sent)
	return n.hubNode.Release(ctx, key, seq, attempt, done, retryAt)
}

// TestALateReleaseLeavesTheNodesNextLeaseAlone: a pull consumer on node A
// holds a message (attempt 1) when its contract is revoked, and A gives
// the lease back: it frees it in memory, lets go of the group's lock,
// then releases the cluster lease. Before that release reaches the
// cluster, another consumer on A takes the message again, attempt 2 of
// the same node. The release named no attempt, and the cluster ended the
// node's lease, attempt 2's: node B then took the message as attempt 3
// while A's consumer ran it. A release now names its attempt: the cluster
// refuses one of attempt 1 (ACK_NOT_ALLOWED, as a Return), attempt 2
// stays A's, and B gets nothing.
func TestALateReleaseLeavesTheNodesNextLeaseAlone(t *testing.T) {
	clk := newClock()
	h := &hub{leases: map[string]*hubLease{}, now: clk.Now}
	shared := memory.New(nil)
	var (
		again      pigeon.AttemptSettler
		retaken    []int
		retakenErr error
	)
	na := &lateRelease{hubNode: h.node(), sent: make(chan struct{}), stall: func() {
		_, retaken, retakenErr = again.ReceiveAttempts(context.Background(), "jobs.run", 10)
	}}
	oa, ob := returnOptions(clk.Now, 5), returnOptions(clk.Now, 5)
	oa.Store, oa.Cluster = viewOf(shared), na
	ob.Store, ob.Cluster = viewOf(shared), h.node()
	a, b := startEngine(t, oa), startEngine(t, ob)

	first := dupConnect(t, a, "crew-token", "jobs.run")
	again = dupConnect(t, a, "crew-token", "jobs.run").(pigeon.AttemptSettler)
	publishN(t, dupConnect(t, a, "boss-token", "jobs.run"), dupCases[0], 0, 1)
	msgs, attempts, err := first.(pigeon.AttemptSettler).ReceiveAttempts(context.Background(), "jobs.run", 10)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.Equal(t, []int{1}, attempts)
	seq := msgs[0].Sequence

	crew, err := a.Authenticate(context.Background(), "crew-token")
	require.NoError(t, err)
	require.NoError(t, a.RevokeContract(context.Background(), crew, first.Contract().ID()))
	awaitOn(t, na.sent, "node A never released the revoked consumer's lease")
	require.NoError(t, retakenErr)
	require.Equal(t, []int{2}, retaken, "node A's other consumer did not take the message again")

	h.mu.Lock()
	l := *h.leases[leaseKey(store.GroupKey{Subject: "jobs.run", Group: pigeon.DefaultGroup}, seq)]
	h.mu.Unlock()
	require.Equal(t, na.hubNode, l.node)
	require.Equal(t, 2, l.attempt)
	require.True(t, clk.Now().Before(l.until), "the late release of attempt 1 ended node A's lease of attempt 2")

	rb := dupConnect(t, b, "crew-token", "jobs.run").(pigeon.AttemptSettler)
	msgs, attempts, err = rb.ReceiveAttempts(context.Background(), "jobs.run", 10)
	require.NoError(t, err)
	require.Empty(t, msgs, "node B took the message node A's consumer holds, as attempt %v", attempts)
}
