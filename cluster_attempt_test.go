package pigeon_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
)

// TestAnAttemptTheStoreFailsToRecordIsCountedOnceInTheCluster: in a
// cluster-shared group the cluster counts a message's attempts as it
// leases it (Leaser.Acquire). When the store then fails to record the
// attempt (a store without quorum for a moment), nobody is handed the
// message, and the node gives the cluster lease back uncounted
// (LeaseReturner, which the hub has; a cluster without it keeps the lease
// for the node's next lease: see
// TestAnAttemptTheStoreFailsToRecordGoesBackToTheCluster), so the next
// lease of the message counts its attempt once. Here a
// message with one attempt allowed is handed over as its first attempt,
// to a pull consumer as to a push subscription. Before, the next lease
// acquired the cluster lease again, which the cluster counts as one more
// attempt of a lease it holds already: the message was exhausted (here,
// dropped unread) with fewer deliveries than its attempts allow.
func TestAnAttemptTheStoreFailsToRecordIsCountedOnceInTheCluster(t *testing.T) {
	tests := []struct {
		name string
		// deliver has crew receive the message, the store failing to
		// record its first attempt once, and returns the attempt it was
		// handed over as.
		deliver func(t *testing.T, crew pigeon.Session) int
	}{
		{"PullReceive", func(t *testing.T, crew pigeon.Session) int {
			r := crew.(pigeon.AttemptSettler)
			_, _, err := r.ReceiveAttempts(context.Background(), "jobs.run", 10)
			requireCode(t, err, pigeon.CodeStoreNoQuorum)
			msgs, attempts, err := r.ReceiveAttempts(context.Background(), "jobs.run", 10)
			require.NoError(t, err)
			require.Len(t, msgs, 1, "the message was exhausted unread")
			return attempts[0]
		}},
		{"PushSubscription", func(t *testing.T, crew pigeon.Session) int {
			got := make(chan int, 4)
			sub, err := crew.Subscribe(context.Background(), "jobs.run", func(_ context.Context, d *pigeon.Delivery) error {
				got <- d.Attempt
				return nil
			})
			require.NoError(t, err)
			t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
			return awaitOn(t, got, "the message was never handed over")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock() // does not move: no lease runs out
			h := &hub{leases: map[string]*hubLease{}, now: clk.Now}
			st := &attemptFailingStore{Store: memory.New(nil), seq: 1}
			o := dupOptions()
			for i := range o.Catalog.Subjects {
				if s := &o.Catalog.Subjects[i]; s.Name == "jobs.run" {
					s.Delivery.Retry.MaxAttempts = 1
				}
			}
			o.Store, o.Cluster, o.Now = st, h.node(), clk.Now
			e := startEngine(t, o)
			id := publishN(t, dupConnect(t, e, "boss-token", "jobs.run"), dupCases[0], 0, 1)[0]

			require.Equal(t, 1, tt.deliver(t, dupConnect(t, e, "crew-token", "jobs.run")))
			require.True(t, st.failed.Load(), "the store's failure was met")
			h.mu.Lock()
			l := h.leases[leaseKey(store.GroupKey{Subject: "jobs.run", Group: pigeon.DefaultGroup}, 1)]
			h.mu.Unlock()
			require.NotNil(t, l)
			require.Equal(t, 1, l.attempt, "the cluster counted one attempt")
			for _, r := range auditOf(t, e, pigeon.EventDeliveryExhausted) {
				require.NotEqual(t, id, r.MessageID, "the message was exhausted")
			}
		})
	}
}
