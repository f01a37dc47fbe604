package metrics_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/metrics"
)

// TestClientChosenSubjectsTakeNoSeries: an authenticated client that
// publishes to ever new subjects that do not exist, or sends envelopes
// the envelope gate refuses under ever new subject names, neither names
// them in the public metrics nor fills pigeon_decisions_total's
// MaxSeries: they count under the subject Unknown, and a catalog
// subject's next decision still gets a series of its own.
func TestClientChosenSubjectsTakeNoSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	var e *pigeon.Engine
	m, err := metrics.New(reg, &metrics.Options{MaxSeries: 10, NoRuntime: true,
		InCatalog: func(s string) bool { _, err := e.Subject(s); return err == nil }})
	require.NoError(t, err)
	e, err = pigeon.New(context.Background(), &pigeon.Options{Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
		Catalog: demo.Catalog(), Region: "uk", Observer: m})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	ctx := context.Background()
	c := notificationsCaller(t, e, "orders-token")
	for i := range 30 {
		msg := demo.Notification("junk-" + strconv.Itoa(i))
		msg.Subject = "secret.customer-" + strconv.Itoa(i)
		_, err := e.Publish(ctx, c, msg)
		require.ErrorIs(t, err, pigeon.ErrDenied)
		msg = demo.Notification("junk-env-" + strconv.Itoa(i))
		msg.Subject, msg.Type = "secret.env-"+strconv.Itoa(i), "" // refused by the envelope gate
		_, err = e.Publish(ctx, c, msg)
		require.ErrorIs(t, err, pigeon.ErrDenied)
	}
	_, err = e.Publish(ctx, c, demo.Notification("real-1"))
	require.NoError(t, err)
	noType := demo.Notification("real-2")
	noType.Type = "" // an envelope refusal on a catalog subject keeps its label
	_, err = e.Publish(ctx, c, noType)
	require.ErrorIs(t, err, pigeon.ErrDenied)

	fams := scrape(t, reg)
	for _, s := range fams["pigeon_decisions_total"].GetMetric() {
		for _, l := range s.GetLabel() {
			if l.GetName() == "subject" {
				require.Contains(t, []string{"notifications.send", metrics.Unknown}, l.GetValue())
			}
		}
	}
	n, ok := value(fams, "pigeon_decisions_total", map[string]string{"subject": metrics.Unknown, "outcome": "deny", "code": "SUBJECT_NOT_FOUND", "gate": "contract"})
	require.True(t, ok)
	require.Equal(t, 30.0, n)
	n, ok = value(fams, "pigeon_decisions_total", map[string]string{"subject": metrics.Unknown, "outcome": "deny", "code": "ENVELOPE_INVALID", "gate": "envelope"})
	require.True(t, ok)
	require.Equal(t, 30.0, n)
	n, ok = value(fams, "pigeon_decisions_total", map[string]string{"subject": "notifications.send", "outcome": "allow", "code": "OK"})
	require.True(t, ok, "the catalog subject's decision has its own series")
	require.Equal(t, 1.0, n)
	n, ok = value(fams, "pigeon_decisions_total", map[string]string{"subject": "notifications.send", "outcome": "deny", "code": "ENVELOPE_INVALID", "gate": "envelope"})
	require.True(t, ok, "an envelope refusal on a catalog subject keeps its subject")
	require.Equal(t, 1.0, n)
}

// TestEnvelopeRefusalsWithoutInCatalog: without Options.InCatalog the
// metrics cannot tell a catalog subject from a client's invention, and
// count every envelope refusal under Unknown.
func TestEnvelopeRefusalsWithoutInCatalog(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, &metrics.Options{NoRuntime: true})
	require.NoError(t, err)
	for _, s := range []string{"notifications.send", "secret.a", "secret.b"} {
		m.Audited(pigeon.AuditRecord{Type: string(pigeon.EventPublishDenied), Outcome: "deny", Code: "ENVELOPE_INVALID", Gate: pigeon.GateEnvelope, Subject: s})
	}
	fams := scrape(t, reg)
	require.Len(t, fams["pigeon_decisions_total"].GetMetric(), 1)
	n, ok := value(fams, "pigeon_decisions_total", map[string]string{"subject": metrics.Unknown, "outcome": "deny", "code": "ENVELOPE_INVALID", "gate": "envelope"})
	require.True(t, ok)
	require.Equal(t, 3.0, n)
}

// TestCursorsNameNoPrincipal: a pull cursor's group is "cursor:" and its
// principal's id; the unauthenticated metrics sum a subject's cursors
// under the group Cursors and name no principal.
func TestCursorsNameNoPrincipal(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := metrics.New(reg, &metrics.Options{NoRuntime: true, Stats: func(context.Context) (pigeon.Stats, error) {
		return pigeon.Stats{Groups: []pigeon.GroupStats{
			{Subject: "chat.messages", Group: "cursor:alice@example.com", Lag: 3, InFlight: 1},
			{Subject: "chat.messages", Group: "cursor:bob", Lag: 4},
			{Subject: "chat.messages", Group: "workers", Lag: 2, InFlight: 2},
			{Subject: "news", Group: "cursor:carol", Lag: 5},
		}}, nil
	}})
	require.NoError(t, err)
	fams := scrape(t, reg)
	for _, name := range []string{"pigeon_consumer_lag", "pigeon_leases_in_flight"} {
		require.Len(t, fams[name].GetMetric(), 3, name)
		for _, s := range fams[name].GetMetric() {
			for _, l := range s.GetLabel() {
				require.NotContains(t, l.GetValue(), "cursor:", name)
			}
		}
	}
	for _, c := range []struct {
		name, subject, group string
		want                 float64
	}{
		{"pigeon_consumer_lag", "chat.messages", metrics.Cursors, 7},
		{"pigeon_leases_in_flight", "chat.messages", metrics.Cursors, 1},
		{"pigeon_consumer_lag", "chat.messages", "workers", 2},
		{"pigeon_leases_in_flight", "chat.messages", "workers", 2},
		{"pigeon_consumer_lag", "news", metrics.Cursors, 5},
	} {
		v, ok := value(fams, c.name, map[string]string{"subject": c.subject, "group": c.group})
		require.True(t, ok, c)
		require.Equal(t, c.want, v, c)
	}
}

// TestConcurrentScrapesShareOneStatsReading: /metrics needs no
// credential and every scrape reads the engine's state (the quarantine,
// every group, a Bounds read per subject); concurrent scrapes share the
// reading in flight rather than each starting one, so a flood of
// requests costs one reading at a time.
func TestConcurrentScrapesShareOneStatsReading(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	reg := prometheus.NewRegistry()
	_, err := metrics.New(reg, &metrics.Options{NoRuntime: true, Stats: func(ctx context.Context) (pigeon.Stats, error) {
		calls.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return pigeon.Stats{AuditRecords: 42}, nil
	}})
	require.NoError(t, err)
	const scrapes = 8
	var wg sync.WaitGroup
	for range scrapes {
		wg.Go(func() {
			fams, err := reg.Gather()
			require.NoError(t, err)
			for _, f := range fams {
				if f.GetName() == "pigeon_audit_records" {
					require.Equal(t, 42.0, f.GetMetric()[0].GetGauge().GetValue())
				}
			}
		})
	}
	require.Eventually(t, func() bool { return calls.Load() > 0 }, 5*time.Second, time.Millisecond)
	time.Sleep(200 * time.Millisecond) // the other scrapes arrive
	close(release)
	wg.Wait()
	require.LessOrEqual(t, calls.Load(), int32(2), "scrapes in flight together share one reading")
	// A scrape after the reading is done reads afresh.
	_, err = reg.Gather()
	require.NoError(t, err)
	require.Greater(t, calls.Load(), int32(1))
}

// TestSelectionGroupsSummedUnderTheirName: the engine keys the group of
// members that select as "NAME|SELECTOR|FILTER|SCOPE" (route values, a
// filter's literals, a grant's scope); the unauthenticated metrics label
// the group by NAME, the selections summed, and show none of the key.
func TestSelectionGroupsSummedUnderTheirName(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := metrics.New(reg, &metrics.Options{NoRuntime: true, Stats: func(context.Context) (pigeon.Stats, error) {
		return pigeon.Stats{Groups: []pigeon.GroupStats{
			{Subject: "orders", Group: `workers|/customer/alice@example.com||`, Lag: 3, InFlight: 1},
			{Subject: "orders", Group: `workers||25:/customer/bob@example.com18:data.ssn == "123|4"0:`, Lag: 4},
			{Subject: "orders", Group: "workers", Lag: 1},
			{Subject: "orders", Group: "default|scope:/tenant/acme", Lag: 2, InFlight: 2},
		}}, nil
	}})
	require.NoError(t, err)
	fams := scrape(t, reg)
	for _, name := range []string{"pigeon_consumer_lag", "pigeon_leases_in_flight"} {
		require.Len(t, fams[name].GetMetric(), 2, name)
		for _, s := range fams[name].GetMetric() {
			for _, l := range s.GetLabel() {
				require.NotContains(t, l.GetValue(), "|", name)
			}
		}
	}
	for _, c := range []struct {
		name, group string
		want        float64
	}{
		{"pigeon_consumer_lag", "workers", 8},
		{"pigeon_leases_in_flight", "workers", 1},
		{"pigeon_consumer_lag", "default", 2},
		{"pigeon_leases_in_flight", "default", 2},
	} {
		v, ok := value(fams, c.name, map[string]string{"subject": "orders", "group": c.group})
		require.True(t, ok, c)
		require.Equal(t, c.want, v, c)
	}
}

// TestSubscriberFilterNotInMetrics: a subscriber's filter (its literals
// are data: here a recipient's address) is part of its group's key in
// Stats; the public lag series name the group alone.
func TestSubscriberFilterNotInMetrics(t *testing.T) {
	e, reg := newEngine(t)
	c := notificationsCaller(t, e, "notifier-token")
	sub, err := e.Subscribe(context.Background(), c, "notifications.send", func(context.Context, *pigeon.Delivery) error { return nil },
		pigeon.WithFilter(`message.data.recipientId == "alice@example.com"`))
	require.NoError(t, err)
	defer func() { require.NoError(t, sub.Unsubscribe(context.Background())) }()
	fams := scrape(t, reg)
	require.Len(t, fams["pigeon_consumer_lag"].GetMetric(), 1)
	_, ok := value(fams, "pigeon_consumer_lag", map[string]string{"subject": "notifications.send", "group": pigeon.DefaultGroup})
	require.True(t, ok)
}

// TestLabelValuesNotUTF8DoNotPanic: Prometheus panics on a label value
// that is not UTF-8 in a vector's series, and refuses it in a scrape.
// The engine bounds what it hands over, but a catalog subject an
// embedding application named so reached the state gauges at every
// scrape (every scrape failed, 500) and an observer call with one would
// panic on the publish path: both are made valid instead.
func TestLabelValuesNotUTF8DoNotPanic(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, &metrics.Options{NoRuntime: true, Stats: func(context.Context) (pigeon.Stats, error) {
		return pigeon.Stats{Subjects: []pigeon.SubjectStats{{Subject: "bad\xff", Messages: 2}},
			Groups: []pigeon.GroupStats{{Subject: "bad\xff", Group: "g\xfe", Lag: 1}}}, nil
	}})
	require.NoError(t, err)
	require.NotPanics(t, func() {
		m.Audited(pigeon.AuditRecord{Type: string(pigeon.EventDeliveryDispatched), Outcome: "allow", Subject: "bad\xff"})
		m.Noted(pigeon.NoteRedelivery, "bad\xff")
	})
	fams := scrape(t, reg)
	v, ok := value(fams, "pigeon_subject_messages", map[string]string{"subject": "bad\uFFFD"})
	require.True(t, ok)
	require.Equal(t, 2.0, v)
	v, ok = value(fams, "pigeon_deliveries_total", map[string]string{"subject": "bad\uFFFD"})
	require.True(t, ok)
	require.Equal(t, 1.0, v)
}
