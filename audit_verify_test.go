package pigeon_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
)

// walkCounter is a memory store that, once armed, counts the walks of the
// audit chain (one AuditHead each) and holds the first one's reads until
// release is closed.
type walkCounter struct {
	*memory.Store
	armed   atomic.Bool
	walks   atomic.Int32
	held    chan struct{} // closed once the first walk reads
	release chan struct{}
	once    sync.Once
}

func (w *walkCounter) AuditHead(ctx context.Context) (store.AuditRecord, store.Checkpoint, error) {
	if w.armed.Load() {
		w.walks.Add(1)
	}
	return w.Store.AuditHead(ctx)
}

func (w *walkCounter) ReadAudit(ctx context.Context, from uint64, max int) ([]store.AuditRecord, error) {
	if w.armed.Load() && w.walks.Load() == 1 {
		w.once.Do(func() { close(w.held) })
		<-w.release
	}
	return w.Store.ReadAudit(ctx, from, max)
}

// TestVerifyAuditSharesWalks: calls made while a walk runs share one walk,
// started after the running one ends, so that ten auditors asking at once
// cost two walks, not ten, and each gets the result of a walk that
// started after it asked; a caller whose context ends stops waiting with
// REQUEST_TIMEOUT while the walk goes on for the others.
func TestVerifyAuditSharesWalks(t *testing.T) {
	st := &walkCounter{Store: memory.New(nil), held: make(chan struct{}), release: make(chan struct{})}
	f := newFixture(t, func(o *pigeon.Options) { o.Store = st })
	ctx := context.Background()
	st.armed.Store(true)

	first := make(chan error, 1)
	go func() { _, err := f.e.VerifyAudit(ctx); first <- err }()
	<-st.held
	const callers = 10
	var wg sync.WaitGroup
	counts := make([]uint64, callers)
	errs := make([]error, callers)
	started := make(chan struct{}, callers)
	for i := range callers {
		wg.Go(func() {
			started <- struct{}{}
			counts[i], errs[i] = f.e.VerifyAudit(ctx)
		})
	}
	for range callers {
		<-started
	}
	// Every caller waits on the next walk before the running one ends.
	require.Eventually(t, func() bool { return pigeon.NextAuditWalkCallers(f.e) == callers }, 30*time.Second, time.Millisecond, "the callers wait")
	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, err := f.e.VerifyAudit(gone)
	requireCode(t, err, pigeon.CodeRequestTimeout)

	close(st.release)
	require.NoError(t, <-first)
	wg.Wait()
	for i := range callers {
		require.NoError(t, errs[i])
		require.Equal(t, counts[0], counts[i])
	}
	require.NotZero(t, counts[0])
	require.LessOrEqual(t, st.walks.Load(), int32(2), "the running walk and one after it")
	n, err := f.e.VerifyAudit(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, counts[0])
}
