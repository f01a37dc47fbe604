package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/metrics"
	"pigeon/store"
	"pigeon/store/memory"
)

// panicSites are the where labels of pigeon_panics_total.
var panicSites = []string{pigeon.PanicGate, pigeon.PanicSubscription, pigeon.PanicFanout, pigeon.PanicObserver,
	pigeon.PanicAuthenticator, pigeon.PanicBackground, pigeon.PanicClock}

// newObservedEngine is newEngine with its options set by opt, which is
// handed the metrics to compose them with other observers; it returns the
// registry the metrics count on.
func newObservedEngine(t *testing.T, opt func(o *pigeon.Options, m *metrics.Metrics)) (*pigeon.Engine, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, &metrics.Options{NoRuntime: true})
	require.NoError(t, err)
	o := &pigeon.Options{Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog(), Region: "uk", Observer: m}
	opt(o, m)
	e, err := pigeon.New(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	return e, reg
}

// panics is pigeon_panics_total{where}, and whether the series is there.
func panics(t *testing.T, reg *prometheus.Registry, where string) (float64, bool) {
	t.Helper()
	return value(scrape(t, reg), "pigeon_panics_total", map[string]string{"where": where})
}

// sweepPanicStore panics once in the janitor's sweep, once armed.
type sweepPanicStore struct {
	store.Store
	armed *atomic.Bool
}

func (s sweepPanicStore) DeleteExpiredContracts(ctx context.Context, t time.Time) (int, error) {
	if s.armed.CompareAndSwap(true, false) {
		panic("sweep")
	}
	return s.Store.DeleteExpiredContracts(ctx, t)
}

// panickyObserver panics in Took and, with notedPanics, in Noted too (an
// Observer with a bug everywhere); it counts the calls.
type panickyObserver struct {
	notedPanics bool
	took, noted *atomic.Int64
}

func (panickyObserver) Audited(pigeon.AuditRecord)                     {}
func (panickyObserver) Committed(pigeon.CommitLog, int, time.Duration) {}
func (o panickyObserver) Took(pigeon.Stage, string, time.Duration)     { o.took.Add(1); panic("took") }
func (o panickyObserver) Noted(pigeon.Note, string) {
	o.noted.Add(1)
	if o.notedPanics {
		panic("noted")
	}
}

// TestSurvivedPanicsAreCounted: every panic the engine survives is counted
// in pigeon_panics_total by where it was (a bounded set), as well as
// logged, so that one alert can fire on any of them; the fan-out's are
// also counted by subject (TestFanoutPanicsAreCounted). An Observer that
// panics is counted even when it comes before the metrics in Observers and
// its Noted panics as well: each observer of the list is handed a note
// under its own recover, and the note of an observer's panic that panics
// is only logged (noted again, it would call the Observer for ever).
func TestSurvivedPanicsAreCounted(t *testing.T) {
	boom := demo.Notification("k-boom")
	boom.Data = json.RawMessage(`{"recipientId":"boom@example.com","channel":"email","templateId":"order-shipped"}`)
	clockArmed, sweepArmed := &atomic.Bool{}, &atomic.Bool{}
	publish := func(t *testing.T, e *pigeon.Engine, m *pigeon.Message) {
		_, _ = e.Publish(context.Background(), notificationsCaller(t, e, "orders-token"), m)
	}
	for _, tc := range []struct {
		where string
		opt   func(o *pigeon.Options, m *metrics.Metrics)
		do    func(t *testing.T, e *pigeon.Engine)
	}{
		{pigeon.PanicGate, func(o *pigeon.Options, _ *metrics.Metrics) {
			o.Gates = []pigeon.Gate{pigeon.GateFunc("panicky", func(_ context.Context, a *pigeon.Admission) pigeon.Verdict {
				if bytes.Contains(a.Message.Data, []byte("boom")) {
					panic("boom")
				}
				return pigeon.Allow()
			})}
		}, func(t *testing.T, e *pigeon.Engine) { publish(t, e, boom) }},
		{pigeon.PanicObserver, func(o *pigeon.Options, m *metrics.Metrics) {
			o.Observer = pigeon.Observers(panickyObserver{notedPanics: true, took: &atomic.Int64{}, noted: &atomic.Int64{}}, m)
		}, func(t *testing.T, e *pigeon.Engine) { publish(t, e, demo.Notification("k-fine")) }},
		{pigeon.PanicAuthenticator, func(o *pigeon.Options, _ *metrics.Metrics) {
			a := o.Authenticator
			o.Authenticator = pigeon.AuthenticatorFunc(func(ctx context.Context, token string) (*pigeon.Principal, error) {
				if token == "boom" {
					panic("boom")
				}
				return a.Authenticate(ctx, token)
			})
		}, func(t *testing.T, e *pigeon.Engine) {
			_, err := e.Authenticate(context.Background(), "boom")
			require.Error(t, err)
		}},
		{pigeon.PanicClock, func(o *pigeon.Options, _ *metrics.Metrics) {
			o.Now = func() time.Time {
				if clockArmed.CompareAndSwap(true, false) {
					panic("clock")
				}
				return time.Now()
			}
		}, func(t *testing.T, e *pigeon.Engine) {
			clockArmed.Store(true) // the next read panics, once
			publish(t, e, demo.Notification("k-fine"))
		}},
		{pigeon.PanicSubscription, func(*pigeon.Options, *metrics.Metrics) {}, func(t *testing.T, e *pigeon.Engine) {
			ctx := context.Background()
			sub, err := e.SubscribeAsync(ctx, notificationsCaller(t, e, "notifier-token"), "notifications.send",
				func(context.Context, *pigeon.Delivery, func(error)) { panic("handler") })
			require.NoError(t, err)
			t.Cleanup(func() { _ = sub.Unsubscribe(ctx) })
			publish(t, e, demo.Notification("k-fine"))
		}},
		{pigeon.PanicBackground, func(o *pigeon.Options, _ *metrics.Metrics) {
			o.Store, o.SweepInterval = sweepPanicStore{Store: memory.New(nil), armed: sweepArmed}, time.Millisecond
		}, func(*testing.T, *pigeon.Engine) { sweepArmed.Store(true) }},
	} {
		t.Run(tc.where, func(t *testing.T) {
			e, reg := newObservedEngine(t, tc.opt)
			for _, w := range panicSites {
				got, ok := panics(t, reg, w)
				require.True(t, ok, "%s is there before any panic, for an alert's increase()", w)
				require.Zero(t, got, w)
			}
			tc.do(t, e)
			var got float64
			require.Eventually(t, func() bool {
				got, _ = panics(t, reg, tc.where)
				return got >= 1
			}, 30*time.Second, 10*time.Millisecond, "counted %v", got)
		})
	}
}

// TestObserverPanicOfNotedIsNotNotedAgain: an Observer whose Noted always
// panics is called once for the note of each of its panics, never again
// for the note's own panic (which would recurse for ever).
func TestObserverPanicOfNotedIsNotNotedAgain(t *testing.T) {
	o := panickyObserver{notedPanics: true, took: &atomic.Int64{}, noted: &atomic.Int64{}}
	e, _ := newObservedEngine(t, func(opts *pigeon.Options, _ *metrics.Metrics) { opts.Observer = o })
	_, err := e.Publish(context.Background(), notificationsCaller(t, e, "orders-token"), demo.Notification("k-fine"))
	require.NoError(t, err)
	require.Positive(t, o.took.Load())
	require.Equal(t, o.took.Load(), o.noted.Load(), "one note per panic of Took")
}

// TestObserverPanicInNotedIsCounted: an Observer listed before the
// metrics whose Noted panics on every note: the note it panicked on (a
// gate's panic) and its own panic reach the metrics.
func TestObserverPanicInNotedIsCounted(t *testing.T) {
	boom := demo.Notification("k-boom")
	boom.Data = json.RawMessage(`{"recipientId":"boom@example.com","channel":"email","templateId":"order-shipped"}`)
	o := panickyObserver{notedPanics: true, took: &atomic.Int64{}, noted: &atomic.Int64{}}
	e, reg := newObservedEngine(t, func(opts *pigeon.Options, m *metrics.Metrics) {
		opts.Observer = pigeon.Observers(o, m)
		opts.Gates = []pigeon.Gate{pigeon.GateFunc("panicky", func(_ context.Context, a *pigeon.Admission) pigeon.Verdict {
			if bytes.Contains(a.Message.Data, []byte("boom")) {
				panic("boom")
			}
			return pigeon.Allow()
		})}
	})
	_, err := e.Publish(context.Background(), notificationsCaller(t, e, "orders-token"), boom)
	require.Equal(t, pigeon.CodeInternal, pigeon.ErrorCode(err), "%v", err)
	got, _ := panics(t, reg, pigeon.PanicGate)
	require.EqualValues(t, 1, got)
	// Took panicked (once per publish observed) and Noted on the gate's note.
	got, _ = panics(t, reg, pigeon.PanicObserver)
	require.EqualValues(t, o.took.Load()+1, got)
}

// TestPanicNoteIsCounted: NotePanic counts by where; a where the engine
// does not send counts under Other, never as a series of its own.
func TestPanicNoteIsCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	require.NoError(t, err)
	m.Noted(pigeon.NotePanic, pigeon.PanicGate)
	m.Noted(pigeon.NotePanic, pigeon.PanicGate)
	m.Noted(pigeon.NotePanic, "a client's text")
	got, ok := panics(t, reg, pigeon.PanicGate)
	require.True(t, ok)
	require.EqualValues(t, 2, got)
	got, ok = panics(t, reg, metrics.Other)
	require.True(t, ok)
	require.EqualValues(t, 1, got)
	_, ok = panics(t, reg, "a client's text")
	require.False(t, ok)
}
