package metrics_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/internal/leakcheck"
	"pigeon/metrics"
	"pigeon/store"
	"pigeon/store/wal"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// newEngine is an engine on the demo catalog observed by fresh metrics on
// their own registry.
// With st nil the engine has its own in-memory store.
func newEngine(t *testing.T, st ...store.Store) (*pigeon.Engine, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	var e *pigeon.Engine
	m, err := metrics.New(reg, &metrics.Options{Stats: func(ctx context.Context) (pigeon.Stats, error) { return e.Stats(ctx) },
		InCatalog: func(s string) bool { _, err := e.Subject(s); return err == nil }})
	require.NoError(t, err)
	o := &pigeon.Options{Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog(), Region: "uk", Observer: m}
	if len(st) > 0 {
		o.Store = st[0]
	}
	e, err = pigeon.New(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	return e, reg
}

// scrape reads the registry over HTTP on 127.0.0.1 and parses the text
// exposition with the Prometheus parser.
// notificationsCaller authenticates token and negotiates a contract on
// notifications.send in uk: the caller the engine's methods take.
func notificationsCaller(t *testing.T, e *pigeon.Engine, token string) pigeon.Caller {
	t.Helper()
	ctx := context.Background()
	p, err := e.Authenticate(ctx, token)
	require.NoError(t, err)
	k, err := e.Negotiate(ctx, p, "uk", []string{"notifications.send"}, 0)
	require.NoError(t, err)
	return pigeon.Caller{Principal: p, Region: "uk", ContractID: k.Info().ID}
}

func scrape(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	hs := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer hs.Close()
	req, err := http.NewRequest(http.MethodGet, hs.URL, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	require.NoError(t, err)
	return fams
}

// value is the value of the series of name whose labels are exactly
// labels (an empty value is the same as no label, as in the exposition);
// ok is false when there is none.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	nonEmpty := 0
	for _, v := range labels {
		if v != "" {
			nonEmpty++
		}
	}
next:
	for _, m := range f.GetMetric() {
		n := 0
		for _, l := range m.GetLabel() {
			if l.GetValue() == "" {
				continue
			}
			n++
			if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
				continue next
			}
		}
		if n != nonEmpty {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func TestScrapeAfterKnownPublishes(t *testing.T) {
	e, reg := newEngine(t)
	ctx := context.Background()
	orders, err := e.Authenticate(ctx, "orders-token")
	require.NoError(t, err)
	k, err := e.Negotiate(ctx, orders, "uk", []string{"notifications.send"}, 0)
	require.NoError(t, err)
	c := pigeon.Caller{Principal: orders, Region: "uk", ContractID: k.Info().ID}

	for _, key := range []string{"n-1", "n-2", "n-3"} {
		_, err := e.Publish(ctx, c, demo.Notification(key))
		require.NoError(t, err)
	}
	_, err = e.Publish(ctx, c, demo.Notification("n-1")) // a duplicate
	require.NoError(t, err)
	bad := demo.Notification("n-4")
	bad.Data = json.RawMessage(`{"recipientId":42}`) // schema violation: quarantined
	_, err = e.Publish(ctx, c, bad)
	require.ErrorIs(t, err, pigeon.ErrQuarantined)
	noType := demo.Notification("n-5")
	noType.Type = "" // envelope invalid: denied
	_, err = e.Publish(ctx, c, noType)
	require.ErrorIs(t, err, pigeon.ErrDenied)
	for range 2 {
		_, err = e.Authenticate(ctx, "not-a-token")
		require.Error(t, err)
	}
	_, err = e.VerifyAudit(ctx)
	require.NoError(t, err)

	fams := scrape(t, reg)
	want := []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"pigeon_decisions_total", map[string]string{"subject": "notifications.send", "outcome": "allow", "code": "OK", "gate": ""}, 3},
		{"pigeon_decisions_total", map[string]string{"subject": "notifications.send", "outcome": "allow", "code": "OK", "gate": "duplicate"}, 1},
		{"pigeon_decisions_total", map[string]string{"subject": "notifications.send", "outcome": "quarantine", "code": "SCHEMA_INVALID", "gate": "schema"}, 1},
		{"pigeon_decisions_total", map[string]string{"subject": "notifications.send", "outcome": "deny", "code": "ENVELOPE_INVALID", "gate": "envelope"}, 1},
		{"pigeon_audit_events_total", map[string]string{"event": "publish.accepted", "outcome": "allow"}, 3},
		{"pigeon_audit_events_total", map[string]string{"event": "quarantine.created", "outcome": "quarantine"}, 1},
		{"pigeon_auth_failures_total", map[string]string{"method": "token"}, 2},
		{"pigeon_operation_duration_seconds", map[string]string{"stage": "publish"}, 6},
		{"pigeon_operation_duration_seconds", map[string]string{"stage": "negotiate"}, 1},
		{"pigeon_quarantine_open", map[string]string{}, 1},
		{"pigeon_audit_last_verify_ok", map[string]string{}, 1},
		{"pigeon_subscriptions", map[string]string{}, 0},
		{"pigeon_contracts_live", map[string]string{}, 1},
	}
	for _, w := range want {
		got, ok := value(fams, w.name, w.labels)
		require.True(t, ok, "%s%v is missing", w.name, w.labels)
		require.Equal(t, w.value, got, "%s%v", w.name, w.labels)
	}
	commits, ok := value(fams, "pigeon_store_commit_records", map[string]string{"log": "messages"})
	require.True(t, ok)
	require.Equal(t, 4.0, commits, "three accepted and one duplicate append")
	require.Contains(t, fams, "go_goroutines")
	require.Contains(t, fams, "process_cpu_seconds_total")
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				require.NotContains(t, l.GetValue(), "spiffe://", "a principal in a label of %s", f.GetName())
				require.NotContains(t, l.GetValue(), "msg_", "a message id in a label of %s", f.GetName())
			}
		}
	}
}

// TestConsumerLagAndDeliveries: a work queue's lag and leases follow what
// a receiver took and acknowledged.
func TestConsumerLagAndDeliveries(t *testing.T) {
	e, reg := newEngine(t)
	ctx := context.Background()
	orders, notifier := notificationsCaller(t, e, "orders-token"), notificationsCaller(t, e, "notifier-token")
	for _, key := range []string{"a", "b", "c", "d"} {
		_, err := e.Publish(ctx, orders, demo.Notification(key))
		require.NoError(t, err)
	}
	msgs, err := e.Receive(ctx, notifier, "notifications.send", 3)
	require.NoError(t, err)
	require.Len(t, msgs, 3)
	require.NoError(t, e.Ack(ctx, notifier, "notifications.send", msgs[0].ID))
	fams := scrape(t, reg)
	groups := fams["pigeon_consumer_lag"].GetMetric()
	require.Len(t, groups, 1)
	g := map[string]string{}
	for _, l := range groups[0].GetLabel() {
		g[l.GetName()] = l.GetValue()
	}
	require.Equal(t, "notifications.send", g["subject"])
	require.Equal(t, 3.0, groups[0].GetGauge().GetValue(), "four published, one acknowledged")
	inFlight, ok := value(fams, "pigeon_leases_in_flight", g)
	require.True(t, ok)
	require.Equal(t, 2.0, inFlight)
	held, ok := value(fams, "pigeon_subject_messages", map[string]string{"subject": "notifications.send"})
	require.True(t, ok)
	require.Equal(t, 4.0, held, "a work queue retains what was acknowledged")
	held, ok = value(fams, "pigeon_subject_messages", map[string]string{"subject": "payments.authorize"})
	require.True(t, ok, "every subject of the catalog has its series")
	require.Zero(t, held)
	require.Nil(t, fams["pigeon_subject_bytes"], "no subject has retention.maxBytes")
	var delivered float64
	require.Eventually(t, func() bool { // delivery records are written in the background
		delivered, _ = value(scrape(t, reg), "pigeon_deliveries_total", map[string]string{"subject": "notifications.send"})
		return delivered == 3
	}, 30*time.Second, 10*time.Millisecond, "delivered %v", delivered)
}

// TestConsumerLagWithoutConsumers: a group whose consumers have all gone
// (out of the engine's memory, its progress in the store) keeps its lag
// series, so that an alert on it fires when nobody consumes.
func TestConsumerLagWithoutConsumers(t *testing.T) {
	e, reg := newEngine(t)
	ctx := context.Background()
	orders, notifier := notificationsCaller(t, e, "orders-token"), notificationsCaller(t, e, "notifier-token")
	for _, key := range []string{"a", "b", "c", "d"} {
		_, err := e.Publish(ctx, orders, demo.Notification(key))
		require.NoError(t, err)
	}
	msgs, err := e.Receive(ctx, notifier, "notifications.send", 2)
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	for _, m := range msgs {
		require.NoError(t, e.Ack(ctx, notifier, "notifications.send", m.ID))
	}
	groups := scrape(t, reg)["pigeon_consumer_lag"].GetMetric()
	require.Len(t, groups, 1)
	g := map[string]string{}
	for _, l := range groups[0].GetLabel() {
		g[l.GetName()] = l.GetValue()
	}
	require.Equal(t, map[string]string{"subject": "notifications.send", "group": pigeon.DefaultGroup}, g)
	require.Equal(t, 2.0, groups[0].GetGauge().GetValue(), "four published, two acknowledged, no consumer left")
	inFlight, ok := value(scrape(t, reg), "pigeon_leases_in_flight", g)
	require.True(t, ok)
	require.Zero(t, inFlight)
}

// TestLatencyOfBatchesAndPullReceives: PublishBatch on a store that
// appends batches (the WAL) observes the publish latency of each message,
// and a pull receive the deliver latency of each message it hands out.
func TestLatencyOfBatchesAndPullReceives(t *testing.T) {
	st, err := wal.Open(t.TempDir(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close(context.Background())) })
	e, reg := newEngine(t, st)
	ctx := context.Background()
	orders, notifier := notificationsCaller(t, e, "orders-token"), notificationsCaller(t, e, "notifier-token")
	noType := demo.Notification("b-4")
	noType.Type = "" // refused in the batch: observed all the same
	batch := []*pigeon.Message{demo.Notification("b-1"), demo.Notification("b-2"), demo.Notification("b-3"), noType}
	res := e.PublishBatch(ctx, orders, batch)
	require.Len(t, res, 4)
	for _, r := range res[:3] {
		require.NoError(t, r.Err)
	}
	require.ErrorIs(t, res[3].Err, pigeon.ErrDenied)
	msgs, err := e.Receive(ctx, notifier, "notifications.send", 2)
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	msgs, err = e.ReceiveSettled(ctx, notifier, "notifications.send", 5)
	require.NoError(t, err)
	require.Len(t, msgs, 1)

	fams := scrape(t, reg)
	for stage, want := range map[string]float64{"publish": 4, "deliver": 3, "negotiate": 2} {
		got, ok := value(fams, "pigeon_operation_duration_seconds", map[string]string{"stage": stage})
		require.True(t, ok, stage)
		require.Equal(t, want, got, stage)
	}
	commits, ok := value(fams, "pigeon_store_commit_records", map[string]string{"log": "messages"})
	require.True(t, ok)
	require.Equal(t, 1.0, commits, "the three admitted messages in one write")
}

// TestNoLagSeriesForRemovedSubjects: a group Stats marks NotInCatalog
// has no lag or lease series and takes no place under MaxSeries; the
// groups of the catalog's subjects keep theirs, those past MaxSeries
// summed under Other.
func TestNoLagSeriesForRemovedSubjects(t *testing.T) {
	reg := prometheus.NewRegistry()
	stats := pigeon.Stats{Groups: []pigeon.GroupStats{
		{Subject: "a", Group: "g", Lag: 1},
		{Subject: "b", Group: "g", Lag: 10, InFlight: 1, NotInCatalog: true},
		{Subject: "c", Group: "g", Lag: 100},
		{Subject: "d", Group: "g", Lag: 1000, InFlight: 2},
		{Subject: "e", Group: "g", Lag: 10000, NotInCatalog: true},
	}}
	_, err := metrics.New(reg, &metrics.Options{MaxSeries: 3, NoRuntime: true,
		Stats: func(context.Context) (pigeon.Stats, error) { return stats, nil }})
	require.NoError(t, err)
	fams := scrape(t, reg)
	for _, name := range []string{"pigeon_consumer_lag", "pigeon_leases_in_flight"} {
		got := map[string]float64{}
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "subject" {
					got[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
		want := map[string]float64{"a": 1, "c": 100, metrics.Other: 1000}
		if name == "pigeon_leases_in_flight" {
			want = map[string]float64{"a": 0, "c": 0, metrics.Other: 2}
		}
		require.Equal(t, want, got, name)
	}
}

// TestNoSubjectSeriesForRemovedSubjects: a subject Stats marks
// NotInCatalog (messages left by a subject removed from the policy) has
// no messages or bytes series and takes no place under MaxSeries.
func TestNoSubjectSeriesForRemovedSubjects(t *testing.T) {
	reg := prometheus.NewRegistry()
	stats := pigeon.Stats{Subjects: []pigeon.SubjectStats{
		{Subject: "a", Messages: 1, Bytes: 10, MaxBytes: 100},
		{Subject: "c", Messages: 100},
		{Subject: "d", Messages: 1000, Bytes: 20, MaxBytes: 100},
		{Subject: "b", Messages: 10, NotInCatalog: true},
		{Subject: "e", Messages: 10000, NotInCatalog: true},
	}}
	_, err := metrics.New(reg, &metrics.Options{MaxSeries: 3, NoRuntime: true,
		Stats: func(context.Context) (pigeon.Stats, error) { return stats, nil }})
	require.NoError(t, err)
	fams := scrape(t, reg)
	for name, want := range map[string]map[string]float64{
		"pigeon_subject_messages": {"a": 1, "c": 100, metrics.Other: 1000},
		"pigeon_subject_bytes":    {"a": 10, metrics.Other: 20},
	} {
		got := map[string]float64{}
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "subject" {
					got[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
		require.Equal(t, want, got, name)
	}
}

// TestLabelsStayBounded: publishes to ever new subjects end in one Other
// series once MaxSeries is reached.
func TestLabelsStayBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, &metrics.Options{MaxSeries: 3, NoRuntime: true})
	require.NoError(t, err)
	for i := range 10 {
		m.Audited(pigeon.AuditRecord{Type: string(pigeon.EventPublishDenied), Outcome: "deny", Code: "RATE_LIMITED", Gate: "rate", Subject: "s." + string(rune('a'+i))})
	}
	fams := scrape(t, reg)
	require.Len(t, fams["pigeon_decisions_total"].GetMetric(), 3)
	other, ok := value(fams, "pigeon_decisions_total", map[string]string{"subject": metrics.Other, "outcome": metrics.Other, "code": metrics.Other, "gate": metrics.Other})
	require.True(t, ok)
	require.Equal(t, 8.0, other)
}

// TestConcurrentSeries: goroutines adding label sets while others count
// on known ones lose no count, and the series stay within MaxSeries (the
// copy-on-write cache under the race detector).
func TestConcurrentSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, &metrics.Options{MaxSeries: 20, NoRuntime: true})
	require.NoError(t, err)
	const workers, subjects, rounds = 8, 50, 20
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				for i := range subjects {
					m.Audited(pigeon.AuditRecord{Type: string(pigeon.EventPublishAccepted), Outcome: "allow",
						Subject: "s." + strconv.Itoa((i+w+r)%subjects)})
				}
			}
		})
	}
	wg.Wait()
	fams := scrape(t, reg)
	series := fams["pigeon_decisions_total"].GetMetric()
	require.LessOrEqual(t, len(series), 20)
	var sum float64
	for _, s := range series {
		sum += s.GetCounter().GetValue()
	}
	require.Equal(t, float64(workers*subjects*rounds), sum)
}

// TestObserveKnownSeriesAllocatesNothing: once a label set has its series,
// counting on it allocates nothing.
func TestObserveKnownSeriesAllocatesNothing(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry(), &metrics.Options{NoRuntime: true})
	require.NoError(t, err)
	rec := pigeon.AuditRecord{Type: string(pigeon.EventPublishAccepted), Outcome: "allow", Subject: "payments.authorize"}
	m.Audited(rec)
	require.Zero(t, testing.AllocsPerRun(100, func() {
		m.Audited(rec)
		m.Took(pigeon.StagePublish, rec.Subject, time.Microsecond)
	}))
}

func TestRegisteringTwiceFails(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := metrics.New(reg, nil)
	require.NoError(t, err)
	_, err = metrics.New(reg, nil)
	require.Error(t, err)
}

// BenchmarkObservePublish is what the metrics cost one accepted publish:
// its acceptance record, its latency and its store write.
func BenchmarkObservePublish(b *testing.B) {
	m, err := metrics.New(prometheus.NewRegistry(), &metrics.Options{NoRuntime: true})
	if err != nil {
		b.Fatal(err)
	}
	rec := pigeon.AuditRecord{Type: string(pigeon.EventPublishAccepted), Outcome: "allow", Subject: "payments.authorize",
		Principal: demo.Checkout, MessageID: "msg_1"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Audited(rec)
			m.Took(pigeon.StagePublish, rec.Subject, time.Microsecond)
			m.Committed(pigeon.CommitMessages, 1, time.Microsecond)
		}
	})
}

// TestQuarantineSkippedIsCounted: a refusal whose copy the quarantine
// rate did not keep is counted by subject.
func TestQuarantineSkippedIsCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	require.NoError(t, err)
	m.Noted(pigeon.NoteQuarantineSkipped, "payments.authorize")
	m.Noted(pigeon.NoteQuarantineSkipped, "payments.authorize")
	got, ok := value(scrape(t, reg), "pigeon_quarantine_skipped_total", map[string]string{"subject": "payments.authorize"})
	require.True(t, ok)
	require.EqualValues(t, 2, got)
}

// TestRepliesNotKeptAreCounted: a reply not kept for a later claim is
// counted by subject.
func TestRepliesNotKeptAreCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	require.NoError(t, err)
	m.Noted(pigeon.NoteReplyNotKept, "payments.authorize")
	got, ok := value(scrape(t, reg), "pigeon_replies_not_kept_total", map[string]string{"subject": "payments.authorize"})
	require.True(t, ok)
	require.EqualValues(t, 1, got)
}

// TestConnectionsRefused: Options.ConnectionsRefused is read at every
// scrape into pigeon_connections_refused_total, by reason.
func TestConnectionsRefused(t *testing.T) {
	reg := prometheus.NewRegistry()
	var limit, locked uint64 = 3, 7
	_, err := metrics.New(reg, &metrics.Options{NoRuntime: true, ConnectionsRefused: func() (uint64, uint64) { return limit, locked }})
	require.NoError(t, err)
	fams := scrape(t, reg)
	v, ok := value(fams, "pigeon_connections_refused_total", map[string]string{"reason": "limit"})
	require.True(t, ok)
	require.Equal(t, 3.0, v)
	v, ok = value(fams, "pigeon_connections_refused_total", map[string]string{"reason": "locked_out"})
	require.True(t, ok)
	require.Equal(t, 7.0, v)
	locked++
	v, _ = value(scrape(t, reg), "pigeon_connections_refused_total", map[string]string{"reason": "locked_out"})
	require.Equal(t, 8.0, v)
}
