package wal

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The commit delay waits for the writers in flight, not only for as many
// as the last batch held: three writers queue while a lone writer's batch
// is fsynced, and their batch waits for the lone writer to come back, so
// that the four share the next fsync instead of taking turns, three and
// one, each with an fsync of its own. The delay is far longer than the
// lone writer takes to come back: only the fourth arrival ends the wait.
func TestBatchDelayWaitsForWritersInFlight(t *testing.T) {
	ctx := t.Context()
	s := open(t, t.TempDir(), &Options{BatchDelay: 5 * time.Second})
	_, _, err := s.Append(ctx, msg("a", "first", at(0)))
	require.NoError(t, err)
	sub, _ := s.subject("a", false)
	w := sub.w
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.faults.Store(&faults{sync: func(l *logw) error {
		if l == w {
			once.Do(func() { close(held); <-release })
		}
		return nil
	}})
	before := w.batches.Load()

	var lone sync.WaitGroup
	back := make(chan struct{})
	lone.Go(func() { // written alone, then back with its next message
		_, _, err := s.Append(ctx, msg("a", "lone-0", at(0)))
		require.NoError(t, err)
		<-back
		_, _, err = s.Append(ctx, msg("a", "lone-1", at(0)))
		require.NoError(t, err)
	})
	<-held // the lone writer's batch is being written
	var others sync.WaitGroup
	for i := range 3 {
		others.Go(func() {
			_, _, err := s.Append(ctx, msg("a", fmt.Sprint("other-", i), at(0)))
			require.NoError(t, err)
		})
	}
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.queue) == 3
	}, 10*time.Second, time.Millisecond, "the three queue behind the batch being written")
	close(release)
	// The three's leader either waits for the lone writer or has written
	// them without it; only then does the lone writer come back.
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.lingering || w.batches.Load() > before+1
	}, 10*time.Second, time.Millisecond)
	close(back)
	lone.Wait()
	others.Wait()

	require.Equal(t, before+2, w.batches.Load(), "the lone writer's batch, then one for all four")
	require.Len(t, readAll(t, s, "a"), 6)
}
