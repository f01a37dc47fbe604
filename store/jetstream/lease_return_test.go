package jetstream

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
)

// leaseEntry reads the lease key of seq from the leases bucket's leader:
// its value and revision (nil and 0 when there is none).
func leaseEntry(ctx context.Context, t *testing.T, s *Store, key store.GroupKey, seq uint64) ([]byte, uint64) {
	t.Helper()
	m, err := leaderLast(ctx, s.nc, s.bucketName("leases"), leaseKey(key, seq))
	require.NoError(t, err)
	if m == nil {
		return nil, 0
	}
	return m.Data, m.Sequence
}

// TestReturnGivesTheAttemptBack: a lease whose message never reached a
// consumer is given back uncounted (pigeon.LeaseReturner): once the
// engine has lowered the group's stored attempt, the next Acquire, on
// this node or another, is the same attempt. Before, the only way back
// was a release, and every Acquire counted one more attempt, of a lease
// released or still held: a message bounced by sends that fail was
// exhausted unread. A lease that is not this process's at that attempt
// (another node's, settled, leased again at another attempt, gone) is
// left as it is, and the answer is ACK_NOT_ALLOWED.
func TestReturnGivesTheAttemptBack(t *testing.T) {
	n := startTwoNodes(t)
	ctx, sa, a, b, key := n.ctx, n.sa, n.a, n.b, n.key

	// acquire leases seq to n until deadline, and records the attempt in
	// the group's progress, as the engine does.
	acquire := func(t *testing.T, n *Cluster, seq uint64, deadline time.Time) int {
		t.Helper()
		st, err := n.Acquire(ctx, key, seq, deadline)
		require.NoError(t, err)
		require.True(t, st.Acquired, "%+v", st)
		require.NoError(t, sa.MarkAttempt(ctx, key, seq, st.Attempt))
		return st.Attempt
	}

	t.Run("Held", func(t *testing.T) {
		for i, tc := range []struct {
			name string
			// ranOut lets a's lease run out (not taken) before
			// it is given back.
			ranOut bool
			// lowered: the group's stored attempt is lowered first, as
			// the engine does.
			lowered bool
			want    int // the attempt of the next lease
		}{
			{name: "Held", lowered: true, want: 1},
			{name: "RanOutNotTaken", ranOut: true, lowered: true, want: 1},
			{name: "StoredAttemptNotLowered", want: 2},
		} {
			t.Run(tc.name, func(t *testing.T) {
				seq := uint64(10 + i)
				d := time.Minute
				if tc.ranOut {
					d = -time.Second
				}
				require.Equal(t, 1, acquire(t, a, seq, time.Now().Add(d)))
				if tc.lowered {
					require.NoError(t, sa.LowerAttempt(ctx, key, seq, 1, 0))
				}
				retryAt := time.Now()
				require.NoError(t, a.Return(ctx, key, seq, 1, retryAt))
				require.NoError(t, a.Return(ctx, key, seq, 1, retryAt), "a return repeated")

				require.Equal(t, tc.want, acquire(t, b, seq, time.Now().Add(time.Minute)), "the next lease, on another node")
				if !tc.lowered {
					return
				}
				require.NoError(t, sa.LowerAttempt(ctx, key, seq, 1, 0))
				require.NoError(t, b.Return(ctx, key, seq, 1, time.Now()))
				require.Equal(t, 1, acquire(t, a, seq, time.Now().Add(time.Minute)), "the next lease, back on the first node")
			})
		}
	})

	t.Run("LeftAlone", func(t *testing.T) {
		for i, tc := range []struct {
			name string
			// lease sets up the lease of seq and returns the attempt a
			// gives back.
			lease func(t *testing.T, seq uint64) int
		}{
			{"AnotherNodes", func(t *testing.T, seq uint64) int {
				n := acquire(t, a, seq, time.Now().Add(-time.Second)) // ran out
				require.Equal(t, 2, acquire(t, b, seq, time.Now().Add(time.Minute)))
				return n
			}},
			{"SettledByAnotherNode", func(t *testing.T, seq uint64) int {
				n := acquire(t, a, seq, time.Now().Add(-time.Second))
				m := acquire(t, b, seq, time.Now().Add(time.Minute))
				require.NoError(t, b.Release(ctx, key, seq, m, true, time.Time{}))
				return n
			}},
			{"Settled", func(t *testing.T, seq uint64) int {
				n := acquire(t, a, seq, time.Now().Add(time.Minute))
				require.NoError(t, a.Release(ctx, key, seq, n, true, time.Time{}))
				return n
			}},
			{"OtherAttempt", func(t *testing.T, seq uint64) int {
				n := acquire(t, a, seq, time.Now().Add(time.Minute))
				require.NoError(t, a.Release(ctx, key, seq, n, false, time.Now()))
				require.Equal(t, 2, acquire(t, a, seq, time.Now().Add(time.Minute)))
				return n
			}},
			{"Gone", func(*testing.T, uint64) int { return 1 }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				seq := uint64(100 + i)
				n := tc.lease(t, seq)
				before, rev := leaseEntry(ctx, t, sa, key, seq)
				err := a.Return(ctx, key, seq, n, time.Now())
				require.Error(t, err)
				require.Equal(t, pigeon.CodeAckNotAllowed, pigeon.ErrorCode(err), "%v", err)
				after, revAfter := leaseEntry(ctx, t, sa, key, seq)
				require.Equal(t, rev, revAfter, "the lease was written: %s, then %s", before, after)
				require.Equal(t, string(before), string(after))
			})
		}
	})
}

// TestLaggingReplicaReturn: a Return whose read a replica behind answers
// (without this node's lease) reads the lease again from the bucket's
// leader, and gives it back, rather than report it not held.
func TestLaggingReplicaReturn(t *testing.T) {
	ctx, s, c, key := heldLeaseBehindReplica(t)

	retryAt := time.Now()
	require.NoError(t, c.Return(ctx, key, 1, 1, retryAt), "a return after the replica behind's read")
	val, _ := leaseEntry(ctx, t, s, key, 1)
	var l leaseVal
	require.NoError(t, json.Unmarshal(val, &l))
	require.Equal(t, leaseVal{Node: l.Node, Inst: l.Inst, Until: retryAt.UnixNano(), Attempt: 0, Released: true}, l, "the leader holds %s", val)
	require.NoError(t, c.Return(ctx, key, 1, 1, retryAt), "repeated")
}

// TestAnUndeliveredMessageKeepsItsAttemptAcrossNodes: two engines on one
// JetStream store. A handler that cannot take a delivery
// (pigeon.ErrUndelivered, as a transport that could not send it says)
// gives it back uncounted, and the next delivery, on either node, is the
// same attempt. Before, the cluster counted every lease: a message
// allowed two attempts whose first two deliveries were undelivered was
// exhausted without ever reaching a handler. Here three are undelivered
// and the fourth, still attempt 1, is acknowledged.
func TestAnUndeliveredMessageKeepsItsAttemptAcrossNodes(t *testing.T) {
	srv := runServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	prefix := freshPrefix()
	twoAttempts := func(o *pigeon.Options) {
		for i := range o.Catalog.Subjects {
			if s := &o.Catalog.Subjects[i]; s.Name == "jobs.cluster" {
				s.Delivery.Retry.MaxAttempts = 2
			}
		}
	}
	nodes := []*pigeonNode{
		clusterEngine(ctx, t, connect(t, srv.ClientURL()), &Options{Prefix: prefix, Node: "a", Memory: true}, twoAttempts),
		clusterEngine(ctx, t, connect(t, srv.ClientURL()), &Options{Prefix: prefix, Node: "b", Memory: true}, twoAttempts),
	}
	const bounces = 3
	var n atomic.Int32
	attempts := make(chan int, 16)
	for _, p := range nodes {
		crew, err := p.e.Connect(ctx, "crew-token", []string{"jobs.cluster"})
		require.NoError(t, err)
		sub, err := crew.Subscribe(ctx, "jobs.cluster", func(_ context.Context, d *pigeon.Delivery) error {
			attempts <- d.Attempt
			if n.Add(1) <= bounces {
				return pigeon.ErrUndelivered
			}
			return nil
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
	}
	boss, err := nodes[0].e.Connect(ctx, "boss-token", []string{"jobs.cluster"})
	require.NoError(t, err)
	_, err = boss.Publish(ctx, jobMsg(1))
	require.NoError(t, err)

	for i := range bounces + 1 {
		select {
		case got := <-attempts:
			require.Equal(t, 1, got, "delivery %d counted the undelivered ones before it", i+1)
		case <-ctx.Done():
			t.Fatalf("delivery %d never came", i+1)
		}
	}
	key := store.GroupKey{Subject: "jobs.cluster", Group: pigeon.DefaultGroup}
	require.Eventually(t, func() bool {
		g, err := nodes[1].s.LoadGroup(ctx, key)
		require.NoError(t, err)
		return g.IsDone(1)
	}, 10*time.Second, 10*time.Millisecond, "the delivered message was never settled")
}
