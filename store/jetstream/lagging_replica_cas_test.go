package jetstream

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestLaggingReplicaProgressWrites: a group's progress is written
// compare-and-set on the revision read, and the read is a direct get,
// which a replica behind may answer: the write then fails (the entry is
// not at that revision) and was tried again at once with the same read,
// a hot loop of requests for as long as the replica stayed behind (here
// for good: the call spun until its ctx ended, and failed). A write that
// finds the entry changed reads it again from the bucket's leader.
func TestLaggingReplicaProgressWrites(t *testing.T) {
	srv := runServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true, Timeout: 100 * time.Millisecond})
	require.NoError(t, err)
	key := store.GroupKey{Subject: "orders", Group: "billing"}
	require.NoError(t, s.MarkDone(ctx, key, 1))
	lagDirect(t, s, "KV_"+s.bucketName("progress"))

	require.NoError(t, s.MarkDone(ctx, key, 2), "a write after the replica behind's read")
	require.NoError(t, s.MarkAttempt(ctx, key, 4, 1))
	require.NoError(t, s.RaiseFloor(ctx, key, 3))
	m, err := leaderLast(ctx, s.nc, s.bucketName("progress"), progressKey(key))
	require.NoError(t, err)
	var g store.GroupState
	require.NoError(t, json.Unmarshal(m.Data, &g))
	require.True(t, g.IsDone(1) && g.IsDone(2) && g.IsDone(3), "every write kept: %+v", g)
	require.Equal(t, 1, g.Attempts[4])
}

// TestLaggingReplicaAcquire: Acquire takes a lease compare-and-set on
// the revision its direct get read; a replica of the leases bucket behind
// made it spin, as progress writes did, until its ctx ended. It reads
// the lease again from the leader, and takes it over with the attempt
// after the one the leader holds.
func TestLaggingReplicaAcquire(t *testing.T) {
	srv := runServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true, Timeout: 100 * time.Millisecond})
	require.NoError(t, err)
	c, err := NewCluster(ctx, s)
	require.NoError(t, err)
	key := store.GroupKey{Subject: "orders", Group: "billing"}
	l, err := c.Acquire(ctx, key, 1, time.Now().Add(-time.Second)) // run out at once
	require.NoError(t, err)
	require.True(t, l.Acquired)
	require.Equal(t, 1, l.Attempt)
	lagDirect(t, s, "KV_"+s.bucketName("leases"))

	l, err = c.Acquire(ctx, key, 1, time.Now().Add(time.Minute))
	require.NoError(t, err, "an acquire after the replica behind's read")
	require.True(t, l.Acquired)
	require.Equal(t, 2, l.Attempt, "the lease the leader holds is the one taken over")
}
