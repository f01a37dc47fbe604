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

// TestWatchStartConfirmsOnlyWhatItRead: when a watch begins (a node
// starts, or its watch resumes after a failure) the engine reloads the
// directory, and the node confirms it as applied up to the bucket's last
// revision. The reload may be answered by a replica that is behind (one
// catching up after a partition): the node must not confirm, nor keep,
// a directory without the changes it has not read (a revoked grant or a
// removed role would be back until the next directory change). Here the
// first reload reads nothing, as a replica behind every change would.
func TestWatchStartConfirmsOnlyWhatItRead(t *testing.T) {
	srv := runServer(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s, cl := memoryNode(ctx, t, srv)
	require.NoError(t, s.Put(ctx, "roles", "member", []byte(`{}`)))
	rev := s.dirRev.Load()

	var reloads, listed atomic.Int32
	reload := func(ch pigeon.ClusterChange) {
		if ch.Kind != pigeon.ChangeDirectory || reloads.Add(1) == 1 {
			return // answered by a replica behind every change
		}
		for _, b := range directoryBuckets {
			if _, err := s.List(ctx, b); err != nil {
				return
			}
		}
		listed.Add(1)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = cl.Watch(ctx, reload) }()
	defer func() { cancel(); <-done }()

	require.Eventually(t, func() bool {
		e, err := cl.applied.Get(ctx, cl.recordKey())
		if err != nil {
			return false
		}
		var r appliedRevs
		return json.Unmarshal(e.Value(), &r) == nil && r.Dir >= rev
	}, 10*time.Second, 10*time.Millisecond, "the node confirms the directory")
	require.Positive(t, listed.Load(), "the node confirmed a directory it has not read")
}

// TestDirectoryListNeverGoesBack: the engine replaces its whole directory
// with what a reload lists. A list answered by a replica behind a change
// this node already knows of (its watch delivered it, or it wrote it)
// would bring back what the change took away, on a node that applied and
// confirmed it: such a list fails, retryable, and the engine keeps the
// directory it has. Here the node knows of the next revision of the
// roles bucket before any replica has it.
func TestDirectoryListNeverGoesBack(t *testing.T) {
	srv := runServer(t)
	ctx := t.Context()
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Node: "a", Memory: true})
	require.NoError(t, err)
	require.NoError(t, s.Put(ctx, "roles", "member", []byte(`{}`)))
	_, err = s.List(ctx, "roles")
	require.NoError(t, err)

	var next dirRevs
	next[directoryBucket("roles")] = s.dirRev.Load() + 1
	s.raiseFloor(next)
	_, err = s.List(ctx, "roles")
	require.ErrorIs(t, err, store.ErrNoQuorum, "a list from behind what the node knows")
	_, err = s.List(ctx, "accounts")
	require.NoError(t, err, "another bucket is not held up")

	require.NoError(t, s.Put(ctx, "roles", "admin", []byte(`{}`)))
	got, err := s.List(ctx, "roles")
	require.NoError(t, err)
	require.Len(t, got, 2)
}
