package jetstream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// TestContendedWriteEndsTyped: a compare-and-set write that keeps
// finding its entry changed retries, pausing longer each time, until its
// ctx ends; then it fails with a *ContendedError that wraps the
// context's error. The conflicts here are JetStream's own: every try
// updates the entry at a revision it no longer has.
func TestContendedWriteEndsTyped(t *testing.T) {
	srv := runServer(t)
	s, err := Open(t.Context(), connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = s.progress.Put(ctx, "k", []byte("a"))
	require.NoError(t, err)
	tries, leaderReads := 0, 0
	err = casRetry(ctx, s.bucketName("progress"), "k", func(leader bool) (bool, error) {
		tries++
		if leader {
			leaderReads++
		}
		rev, err := s.progress.Put(ctx, "k", []byte("b")) // another writer
		if err != nil {
			return false, err
		}
		_, err = s.progress.Update(ctx, "k", []byte("c"), rev-1)
		return casDone(err)
	})
	var ce *ContendedError
	require.ErrorAs(t, err, &ce)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, s.bucketName("progress"), ce.Bucket)
	require.Equal(t, tries, ce.Tries)
	require.Equal(t, tries-1, leaderReads, "every try after the first reads from the leader")
	require.False(t, errors.Is(err, jetstream.ErrKeyExists))
}
