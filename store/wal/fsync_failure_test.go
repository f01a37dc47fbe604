package wal

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// A failed fsync ("fsyncgate": the kernel may already have dropped the
// dirty pages and will not report the error again) fails every request of
// its batch, and of the queue behind it, with a typed error; the batch is
// never synced again and answered; an idempotent retry waiting on a failed
// original is stored anew, not answered as its duplicate; nothing of the
// batch is ever visible, before or after a crash; and the log goes on from
// its last committed record.
func TestFailedFsyncFailsTheWholeBatch(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, &Options{BatchDelay: -1})
	ctx := t.Context()
	first := appendN(t, s, "a", 1, 1)
	sub, err := s.subject("a", false)
	require.NoError(t, err)
	w := sub.w

	var (
		mu      sync.Mutex
		hold    = make(chan struct{})
		holding = true
		syncs   atomic.Int32 // fsyncs of subject a since the faults were set
	)
	s.faults.Store(&faults{
		write: func(w *logw) error {
			mu.Lock()
			h := holding && w.name == "subject a"
			holding = false
			mu.Unlock()
			if h {
				<-hold // the first batch waits until the others have queued
			}
			return nil
		},
		sync: func(w *logw) error {
			if w.name != "subject a" {
				return nil
			}
			if syncs.Add(1) == 2 { // the second batch: the queued writers'
				return fmt.Errorf("fsync: %w", syscall.EIO)
			}
			return nil
		},
	})

	type result struct {
		m   store.Message
		dup bool
		err error
	}
	lead := make(chan result, 1)
	go func() {
		m, dup, err := s.Append(ctx, msg("a", "lead", base))
		lead <- result{m, dup, err}
	}()
	require.Eventually(t, func() bool { // the leader holds the log
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.busy
	}, 10*time.Second, time.Millisecond)

	const n = 6
	results := make(chan result, n)
	for i := range n {
		go func() {
			m := msg("a", fmt.Sprint("b", i), base)
			m.IdemKey, m.IdemExpires = fmt.Sprint("key", i), at(time.Hour)
			var got store.Message
			var dup bool
			var err error
			if i%2 == 0 {
				got, dup, err = s.AppendAccepted(ctx, m, store.AuditRecord{Type: "publish.accepted", Time: base})
			} else {
				got, dup, err = s.Append(ctx, m)
			}
			results <- result{got, dup, err}
		}()
	}
	queued := func(k int) func() bool {
		return func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return len(w.queue) == k
		}
	}
	require.Eventually(t, queued(n), 10*time.Second, time.Millisecond)
	// A retry of key0 while its original is queued waits for it.
	retry := make(chan result, 1)
	go func() {
		m := msg("a", "retry0", base)
		m.IdemKey, m.IdemExpires = "key0", at(time.Hour)
		got, dup, err := s.Append(ctx, m)
		retry <- result{got, dup, err}
	}()
	require.Eventually(t, func() bool { // the retry waits on its queued original
		buf := make([]byte, 1<<20)
		return bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("waitOtherLocked"))
	}, 10*time.Second, time.Millisecond)
	close(hold)

	r := <-lead
	require.NoError(t, r.err)
	for range n {
		r := <-results
		require.ErrorIs(t, r.err, syscall.EIO, "every request of the failed batch fails")
		require.Contains(t, r.err.Error(), "wal: write subject a")
	}
	rr := <-retry
	require.NoError(t, rr.err)
	require.False(t, rr.dup, "a retry is never answered as the duplicate of a failed write")
	require.Equal(t, "retry0", rr.m.ID)

	require.Equal(t, int32(3), syncs.Load(), "the failed batch was not synced again: one fsync each for the lead, the failed batch and the retry")
	want := append(first, r.m, rr.m)
	require.Equal(t, want, readAll(t, s, "a"))
	for i := range n {
		_, err := s.Lookup(ctx, fmt.Sprint("b", i))
		require.ErrorIs(t, err, store.ErrNotFound)
	}
	recs, err := s.ReadAudit(ctx, 0, 0)
	require.NoError(t, err)
	require.Empty(t, recs, "no acceptance of a failed write reaches the audit log")

	// After a crash: the same, and the log goes on.
	crashed := crashCopy(t, s)
	s2 := open(t, crashed, nil)
	require.Equal(t, want, readAll(t, s2, "a"))
	recs, err = s2.ReadAudit(ctx, 0, 0)
	require.NoError(t, err)
	require.Empty(t, recs)
	m, _, err := s2.Append(ctx, msg("a", "after", base))
	require.NoError(t, err)
	require.Equal(t, uint64(len(want)+1), m.Seq)
}
