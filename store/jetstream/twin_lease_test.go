package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
)

// twinNodes opens two processes' stores and Clusters on srv under one
// prefix and one node name: a copied configuration, or a replacement
// started while the old process still serves.
func twinNodes(ctx context.Context, t *testing.T, srv *server.Server) (*Cluster, *Cluster) {
	t.Helper()
	prefix := freshPrefix()
	var cls [2]*Cluster
	for i := range cls {
		s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: prefix, Node: "a", Memory: true})
		require.NoError(t, err)
		cls[i], err = NewCluster(ctx, s)
		require.NoError(t, err)
	}
	return cls[0], cls[1]
}

// TestTwinProcessesDoNotShareALease: a lease in <P>_leases named only the
// node that held it, so a second process started under the same node
// name took as its own a message the first one held (Acquire: a second
// consumer ran it at once, attempt 2), extended the first one's lease as
// its own, and freed it (Release) for a third consumer while the first
// one's handler still ran. A lease now names the process too: each
// process holds only its own, and still takes its own lease back (the
// engine frees a lease in memory before the cluster hears of it).
func TestTwinProcessesDoNotShareALease(t *testing.T) {
	srv := runServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	first, second := twinNodes(ctx, t, srv)
	key := store.GroupKey{Subject: "jobs", Group: "workers"}
	deadline := time.Now().Add(time.Minute)

	l, err := first.Acquire(ctx, key, 1, deadline)
	require.NoError(t, err)
	require.True(t, l.Acquired)
	require.Equal(t, 1, l.Attempt)

	l, err = second.Acquire(ctx, key, 1, deadline)
	require.NoError(t, err)
	require.False(t, l.Acquired, "the other process took a lease the first one holds")
	require.WithinDuration(t, deadline, l.Until, time.Millisecond)

	lost, err := second.Extend(ctx, key, []uint64{1}, deadline.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, []uint64{1}, lost, "the other process extended the first one's lease as its own")

	requireNotHeld(t, second.Release(ctx, key, 1, 1, false, time.Now().Add(-time.Second)), "the other process released the first one's lease")
	l, err = second.Acquire(ctx, key, 1, deadline)
	require.NoError(t, err)
	require.False(t, l.Acquired, "the other process's release freed the first one's lease")

	// The holder itself extends and takes its lease again, as before.
	lost, err = first.Extend(ctx, key, []uint64{1}, deadline.Add(time.Minute))
	require.NoError(t, err)
	require.Empty(t, lost)
	l, err = first.Acquire(ctx, key, 1, deadline.Add(time.Minute))
	require.NoError(t, err)
	require.True(t, l.Acquired, "a process takes its own lease again")
	require.Equal(t, 2, l.Attempt)

	// Once it runs out, the other process takes it.
	require.NoError(t, first.Release(ctx, key, 1, 2, false, time.Now().Add(-time.Second)))
	l, err = second.Acquire(ctx, key, 1, deadline)
	require.NoError(t, err)
	require.True(t, l.Acquired)
	require.Equal(t, 3, l.Attempt)
}

// TestTwinProcessesHearEachOther: a process skipped every notice signed
// with its node name as its own, so a reply admitted by another process
// of that name never reached a requester waiting on this one (and a new
// message's notice never reached its subscribers before the next look at
// the store). Only this process's own notices are skipped.
func TestTwinProcessesHearEachOther(t *testing.T) {
	srv := runServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	first, second := twinNodes(ctx, t, srv)
	got := make(chan pigeon.ClusterChange, 16)
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = first.Watch(wctx, func(c pigeon.ClusterChange) {
			if c.Kind == pigeon.ChangeReply || c.Kind == pigeon.ChangeAppended {
				got <- c
			}
		})
	}()
	defer func() { wcancel(); <-done }()
	require.Eventually(t, func() bool { return first.LiveNodes() >= 1 && first.Barrier(ctx) == nil }, 10*time.Second, 10*time.Millisecond)

	// Its own notices stay its own.
	first.Notify(pigeon.ClusterChange{Kind: pigeon.ChangeReply, RequestID: "own", Requester: "alice", Reply: &pigeon.Message{ID: "r0"}})
	// The other process's reach it; until its watch runs, notices may be
	// missed: send again until one arrives.
	var c pigeon.ClusterChange
	require.Eventually(t, func() bool {
		second.Notify(pigeon.ClusterChange{Kind: pigeon.ChangeReply, RequestID: "req-1", Requester: "alice", Reply: &pigeon.Message{ID: "r1"}})
		select {
		case c = <-got:
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	}, 10*time.Second, time.Millisecond, "the other process's reply never reached this one")
	require.Equal(t, "req-1", c.RequestID, "its own notice was reported")
	require.Equal(t, "alice", c.Requester)
}
