package wal

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A truncation waits for the batch being written and then has the log: it
// used to wait for a moment with no batch at all, which writers under load
// rarely leave (against 16 writers a trim took 1.3 s at the median and up
// to 16 s, retention held up and the subject past its bounds meanwhile;
// now about 5 ms). Here a batch is held in its
// write, another writer queues behind it, a trim asks for the log, and the
// held write is let go: the trim goes before the queued writer's batch.
func TestTrimGoesBeforeTheQueuedBatch(t *testing.T) {
	for range 20 {
		s := open(t, t.TempDir(), &Options{Sync: SyncNone, SegmentSize: 512})
		appendN(t, s, "a", 0, 4)
		sub, err := s.subject("a", false)
		require.NoError(t, err)
		w := sub.w

		var mu sync.Mutex
		var order []string
		note := func(what string) { mu.Lock(); order = append(order, what); mu.Unlock() }
		hold, held := make(chan struct{}), make(chan struct{})
		var once sync.Once
		s.faults.Store(&faults{
			write: func(l *logw) error {
				if l == w {
					once.Do(func() { close(held); <-hold })
					note("write")
				}
				return nil
			},
			truncate: func(l *logw) error {
				if l == w {
					note("truncate")
				}
				return nil
			},
		})
		var wg sync.WaitGroup
		wg.Go(func() { appendN(t, s, "a", 4, 1) }) // the held batch
		<-held
		wg.Go(func() { appendN(t, s, "a", 5, 1) }) // queued behind it
		require.Eventually(t, func() bool { w.mu.Lock(); defer w.mu.Unlock(); return len(w.queue) == 1 }, 10*time.Second, time.Millisecond)
		wg.Go(func() {
			_, err := s.TrimThrough(context.Background(), "a", 2)
			require.NoError(t, err)
		})
		require.Eventually(t, func() bool { w.mu.Lock(); defer w.mu.Unlock(); return w.exclWaiting > 0 }, 10*time.Second, time.Millisecond)
		close(hold)
		wg.Wait()
		require.Equal(t, []string{"write", "truncate", "write"}, order)
		require.Len(t, readAll(t, s, "a"), 4)
	}
}
