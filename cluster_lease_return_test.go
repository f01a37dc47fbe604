package pigeon_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
)

// returnOptions are dupOptions with at most maxAttempts deliveries of a
// message of jobs.run, on the clock clk.
func returnOptions(clk func() time.Time, maxAttempts int) *pigeon.Options {
	o := dupOptions()
	for i := range o.Catalog.Subjects {
		if s := &o.Catalog.Subjects[i]; s.Name == "jobs.run" {
			s.Delivery.Retry.MaxAttempts = maxAttempts
		}
	}
	o.Now = clk
	return o
}

// requireNotExhausted requires that no node of es exhausted the message id.
func requireNotExhausted(t *testing.T, id string, es ...*pigeon.Engine) {
	t.Helper()
	for _, e := range es {
		for _, r := range auditOf(t, e, pigeon.EventDeliveryExhausted) {
			require.NotEqual(t, id, r.MessageID, "the message was exhausted")
		}
	}
}

// TestAnUndeliveredMessageKeepsItsAttemptInTheCluster: a delivery a
// transport could not send (ErrUndelivered) is given back uncounted, and
// the next consumer sees the same attempt number. In a cluster-shared
// group the cluster counts the attempts (Leaser.Acquire), from the larger
// of the lease's count and the store's, as store/jetstream does: the
// engine gave the attempt back in its memory only and released the
// cluster lease, and the next lease of the message, on either node,
// counted it again. A message whose sends failed maxAttempts times was
// exhausted (here, dropped) without ever reaching a handler. The node now
// lowers the store's count and gives the cluster lease back uncounted
// (LeaseReturner.Return): four deliveries, three of them undelivered, are
// all attempt 1 of a message allowed two, and the fourth settles it.
func TestAnUndeliveredMessageKeepsItsAttemptInTheCluster(t *testing.T) {
	clk := newClock() // does not move: no lease runs out
	shared := memory.New(nil)
	h := &hub{leases: map[string]*hubLease{}, now: clk.Now, progress: shared}
	var es [2]*pigeon.Engine
	for i := range es {
		o := returnOptions(clk.Now, 2)
		o.Store, o.Cluster = viewOf(shared), h.node()
		es[i] = startEngine(t, o)
	}
	const bounces = 3 // more than the message's attempts
	var n atomic.Int32
	attempts := make(chan int, 16)
	for _, e := range es {
		_, err := dupConnect(t, e, "crew-token", "jobs.run").Subscribe(context.Background(), "jobs.run", func(_ context.Context, d *pigeon.Delivery) error {
			attempts <- d.Attempt
			if n.Add(1) <= bounces {
				return pigeon.ErrUndelivered
			}
			return nil
		})
		require.NoError(t, err)
	}
	id := publishN(t, dupConnect(t, es[0], "boss-token", "jobs.run"), dupCases[0], 0, 1)[0]

	for i := range bounces + 1 {
		require.Equal(t, 1, awaitOn(t, attempts, "the message was not delivered again"), "delivery %d counted the undelivered ones before it", i+1)
	}
	key := store.GroupKey{Subject: "jobs.run", Group: pigeon.DefaultGroup}
	require.Eventually(t, func() bool {
		g, err := shared.LoadGroup(context.Background(), key)
		require.NoError(t, err)
		return g.IsDone(1)
	}, 10*time.Second, 5*time.Millisecond, "the delivered message was never settled")
	requireNotExhausted(t, id, es[:]...)
}

// hiddenReturn is a hub node without its LeaseReturner: a Leaser that
// can only release.
type hiddenReturn struct{ pigeon.Cluster }

// TestAnAttemptTheStoreFailsToRecordGoesBackToTheCluster: node a leases a
// message and the store then fails to record its attempt. With a
// LeaseReturner, a gives the cluster lease back at once, uncounted, and
// node b takes the message as its first attempt; before, a kept the lease
// until its ack wait (here, on a clock that does not move, for ever) for
// its own next lease, and b could not have the message. Without one, a
// keeps the lease and its next lease of the message takes it over,
// counted once (group.unspent).
func TestAnAttemptTheStoreFailsToRecordGoesBackToTheCluster(t *testing.T) {
	for _, tc := range []struct {
		name    string
		returns bool
	}{
		{"Returned", true},
		{"KeptWithoutReturner", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			shared := memory.New(nil)
			h := &hub{leases: map[string]*hubLease{}, now: clk.Now, progress: shared}
			failing := &attemptFailingStore{Store: viewOf(shared), seq: 1}
			oa, ob := returnOptions(clk.Now, 1), returnOptions(clk.Now, 1)
			oa.Store, oa.Cluster = failing, h.node()
			if !tc.returns {
				oa.Cluster = hiddenReturn{oa.Cluster}
			}
			ob.Store, ob.Cluster = viewOf(shared), h.node()
			a, b := startEngine(t, oa), startEngine(t, ob)
			id := publishN(t, dupConnect(t, a, "boss-token", "jobs.run"), dupCases[0], 0, 1)[0]

			ra := dupConnect(t, a, "crew-token", "jobs.run").(pigeon.AttemptSettler)
			rb := dupConnect(t, b, "crew-token", "jobs.run").(pigeon.AttemptSettler)
			_, _, err := ra.ReceiveAttempts(context.Background(), "jobs.run", 10)
			requireCode(t, err, pigeon.CodeStoreNoQuorum)
			require.True(t, failing.failed.Load(), "the store's failure was met")

			msgs, attempts, err := rb.ReceiveAttempts(context.Background(), "jobs.run", 10)
			require.NoError(t, err)
			if !tc.returns {
				require.Empty(t, msgs, "node a's kept lease holds the message")
				msgs, attempts, err = ra.ReceiveAttempts(context.Background(), "jobs.run", 10)
				require.NoError(t, err)
			}
			require.Len(t, msgs, 1, "the message was not handed over")
			require.Equal(t, id, msgs[0].ID)
			require.Equal(t, []int{1}, attempts, "the attempt the store did not record was counted")
			requireNotExhausted(t, id, a, b)
		})
	}
}
