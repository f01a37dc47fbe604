package jetstream

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
)

// watchingNode opens node name's store and Cluster on srv under prefix,
// with a liveness bound long enough that a record written by the test
// stays fresh throughout, and runs its watch, which reloads the
// directory as the engine does and calls onContract (when not nil) for
// each contract it revokes. It returns once the watch has read every
// node's record.
func watchingNode(ctx context.Context, t *testing.T, srv *server.Server, prefix, name string, onContract func(context.Context, string)) (*Store, *Cluster) {
	t.Helper()
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: prefix, Node: name, Memory: true, Liveness: time.Minute})
	require.NoError(t, err)
	cl, err := NewCluster(ctx, s)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = cl.Watch(wctx, func(c pigeon.ClusterChange) {
			switch c.Kind {
			case pigeon.ChangeDirectory:
				for _, b := range directoryBuckets {
					_, _ = s.List(wctx, b)
				}
			case pigeon.ChangeContract:
				if onContract != nil {
					onContract(wctx, c.ContractID)
				}
			}
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, func() bool {
		cl.mu.Lock()
		defer cl.mu.Unlock()
		return cl.ready
	}, 10*time.Second, 5*time.Millisecond, "node %s's watch never read the records", name)
	return s, cl
}

// TestBarrierRetriedOnAnotherNodeWaitsForTheChange: a revocation whose
// barrier failed CLUSTER_UNCONFIRMED (node c lags) says "retry to wait
// again"; a balancer sends the retry to node b, which already applied
// the revocation (a contract revoked again, a grant already revoked,
// write nothing). b's barrier waited only for the changes b itself wrote
// (none), so the retry answered confirmed while c still honoured the
// contract or the grant. So did a node started after the change. A
// barrier now waits for every change its node knows of (written, or
// applied from the others), and still confirms once the others have.
func TestBarrierRetriedOnAnotherNodeWaitsForTheChange(t *testing.T) {
	srv := runServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	prefix := freshPrefix()
	onB := make(chan string, 16)
	sa, a := watchingNode(ctx, t, srv, prefix, "a", nil)
	_, b := watchingNode(ctx, t, srv, prefix, "b", func(_ context.Context, id string) { onB <- id })

	// Node c is live but applied nothing yet.
	lag := func(rec string) {
		t.Helper()
		_, err := a.applied.Put(ctx, token("c"), []byte(rec))
		require.NoError(t, err)
	}
	lag(`{"dir":0,"con":0}`)
	require.Eventually(t, func() bool { return a.LiveNodes() == 3 && b.LiveNodes() == 3 }, 10*time.Second, 5*time.Millisecond)
	unconfirmed := func(t *testing.T, cl *Cluster, what string) {
		t.Helper()
		bctx, bcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer bcancel()
		err := cl.Barrier(bctx)
		require.Error(t, err, "%s answered confirmed while node c has not applied the change", what)
		require.ErrorContains(t, err, "nodes c did not confirm")
	}

	t.Run("ContractRevokedAgain", func(t *testing.T) {
		require.NoError(t, sa.PutContract(ctx, store.ContractRecord{ID: "c1", ExpiresAt: time.Now().Add(time.Hour), Revoked: true}))
		unconfirmed(t, a, "the revoking node")
		select {
		case id := <-onB:
			require.Equal(t, "c1", id)
		case <-ctx.Done():
			t.Fatal("node b never applied the revocation")
		}
		unconfirmed(t, b, "a retry on node b")
	})

	t.Run("GrantRevokedAgain", func(t *testing.T) {
		exp, err := json.Marshal(time.Now().Add(time.Hour))
		require.NoError(t, err)
		require.NoError(t, sa.Put(ctx, "grants.revoked", "g1", exp))
		unconfirmed(t, a, "the revoking node")
		require.Eventually(t, func() bool {
			_, seen := b.confirmedRevs(ctx, t)
			return seen
		}, 10*time.Second, 5*time.Millisecond, "node b never applied the grant's revocation")
		unconfirmed(t, b, "a retry on node b")
	})

	t.Run("NodeStartedAfterTheChange", func(t *testing.T) {
		lag(`{"dir":0,"con":0}`)
		_, d := watchingNode(ctx, t, srv, prefix, "d", nil)
		unconfirmed(t, d, "a retry on a node started after the change")
	})

	t.Run("ConfirmedOnceEveryNodeHas", func(t *testing.T) {
		lag(`{"dir":1000000,"con":1000000}`)
		for name, cl := range map[string]*Cluster{"a": a, "b": b} {
			require.NoError(t, cl.Barrier(ctx), "node %s", name)
		}
	})
}

// confirmedRevs reports node b's own record in <P>_applied and whether
// it confirms the directory's last change.
func (c *Cluster) confirmedRevs(ctx context.Context, t *testing.T) (appliedRevs, bool) {
	t.Helper()
	e, err := c.applied.Get(ctx, c.recordKey())
	if err != nil {
		return appliedRevs{}, false
	}
	var r appliedRevs
	require.NoError(t, json.Unmarshal(e.Value(), &r))
	last, err := c.s.directoryLast(ctx)
	require.NoError(t, err)
	return r, r.Dir >= slicesMax(last[:])
}

func slicesMax(v []uint64) uint64 {
	var m uint64
	for _, x := range v {
		m = max(m, x)
	}
	return m
}
