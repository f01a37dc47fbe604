package metrics_test

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/metrics"
	"pigeon/store"
	"pigeon/store/memory"
)

// boundsPanicStore panics once, the first time a subject's fan-out asks
// it where the subject ends, as a store with a bug might.
type boundsPanicStore struct {
	store.Store
	fired *atomic.Bool
}

func (s boundsPanicStore) Bounds(ctx context.Context, subject string) (uint64, uint64, error) {
	if calledByFanout() && s.fired.CompareAndSwap(false, true) {
		panic("store Bounds failed")
	}
	return s.Store.Bounds(ctx, subject)
}

// calledByFanout reports whether the engine's fan-out is the caller.
func calledByFanout() bool {
	pc := make([]uintptr, 64)
	frames := runtime.CallersFrames(pc[:runtime.Callers(3, pc)])
	for {
		fr, more := frames.Next()
		if strings.HasPrefix(fr.Function, "pigeon.(*fanout).") {
			return true
		}
		if !more {
			return false
		}
	}
}

// TestFanoutPanicsAreCounted: a panic a subject's fan-out survives (here
// its store's Bounds as it starts) is counted in
// pigeon_fanout_panics_total by subject, as well as logged, so that an
// alert can fire on it.
func TestFanoutPanicsAreCounted(t *testing.T) {
	fired := &atomic.Bool{}
	e, reg := newEngine(t, boundsPanicStore{Store: memory.New(nil), fired: fired})
	ctx := context.Background()
	notifier := notificationsCaller(t, e, "notifier-token")
	sub, err := e.Subscribe(ctx, notifier, "notifications.send", func(context.Context, *pigeon.Delivery) error { return nil })
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe(ctx) })
	var got float64
	require.Eventually(t, func() bool {
		got, _ = value(scrape(t, reg), "pigeon_fanout_panics_total", map[string]string{"subject": "notifications.send"})
		return got == 1
	}, 30*time.Second, 10*time.Millisecond, "counted %v", got)
	require.True(t, fired.Load())
	got, _ = value(scrape(t, reg), "pigeon_panics_total", map[string]string{"where": pigeon.PanicFanout})
	require.EqualValues(t, 1, got, "counted among every panic survived")
}

// TestFanoutPanicNoteIsCounted: NoteFanoutPanic counts by subject.
func TestFanoutPanicNoteIsCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	require.NoError(t, err)
	m.Noted(pigeon.NoteFanoutPanic, "payments.authorize")
	m.Noted(pigeon.NoteFanoutPanic, "payments.authorize")
	got, ok := value(scrape(t, reg), "pigeon_fanout_panics_total", map[string]string{"subject": "payments.authorize"})
	require.True(t, ok)
	require.EqualValues(t, 2, got)
}
