package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestLaggingReplicaLowerAttempt: a LowerAttempt whose read a replica
// behind answers (without the attempt it lowers) reads the group again
// from the bucket's leader, and lowers it, rather than report the
// attempt changed: the engine would then spend an attempt it means to
// give back. A refusal is the leader's answer.
func TestLaggingReplicaLowerAttempt(t *testing.T) {
	srv := runServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true, Timeout: 100 * time.Millisecond})
	require.NoError(t, err)
	key := store.GroupKey{Subject: "orders", Group: "billing"}
	require.NoError(t, s.MarkAttempt(ctx, key, 1, 2))
	lagDirect(t, s, "KV_"+s.bucketName("progress"))

	require.NoError(t, s.LowerAttempt(ctx, key, 1, 2, 1), "a lowering after the replica behind's read")
	m, err := leaderLast(ctx, s.nc, s.bucketName("progress"), progressKey(key))
	require.NoError(t, err)
	var g store.GroupState
	require.NoError(t, json.Unmarshal(m.Data, &g))
	require.Equal(t, 1, g.Attempts[1], "the leader holds %+v", g)

	err = s.LowerAttempt(ctx, key, 1, 2, 1)
	var ce *store.AttemptChangedError
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, store.AttemptChangedError{Seq: 1, From: 2, Found: 1}, *ce, "the leader's attempt")
}
