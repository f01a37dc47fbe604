// Package metrics exposes a Pigeon engine to Prometheus: it implements
// pigeon.Observer with github.com/prometheus/client_golang and registers
// every series on a registry the caller provides, so an embedding
// application keeps its own (no global state).
//
// # Cost
//
// The observer methods run on the engine's hot paths. Each one finds its
// series in a copy-on-write map read through an atomic pointer (no lock,
// no write to shared memory) and updates it with atomic operations;
// nothing allocates and nothing locks once a series exists. Only the first
// sighting of a label set takes a mutex, to add its series. Gauges that describe state (lag, leases, open quarantine,
// audit head, connections) are read only when Prometheus scrapes, through
// Options.Stats.
//
// # Bounded labels
//
// Labels are subjects, outcomes, decision codes, gates, event types, stages,
// store logs, authentication methods, the places a survived panic was
// and consumer groups; never a principal
// or a message id. A publish refused for a subject the catalog does not have
// (by the contract gate, or by the envelope gate, which comes before it) is
// counted under the subject Unknown, whatever name the client sent. A
// group label is the name consumers gave the group: the groups the engine
// keeps per selection (selector, filter, receive scope) are summed under
// it, and a subject's pull cursors (one per principal) under Cursors. A name
// the catalog does not bound (a consumer-chosen group) counts toward
// MaxSeries: once a metric holds that many series, new label sets are
// counted under the value "_other". The lag and lease gauges share
// MaxSeries among the subjects, so that the groups consumers start on one
// subject cannot put every other subject's groups under "_other".
//
// # Concurrency
//
// A *Metrics is safe for concurrent use by any number of goroutines.
package metrics

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"pigeon"
)

// DefaultMaxSeries is Options.MaxSeries when it is zero.
const DefaultMaxSeries = 2000

// Other is the label value that stands for every label set beyond
// MaxSeries.
const Other = "_other"

// Unknown is the subject label of a publish refusal whose subject the
// client chose and the catalog did not vouch for: an unknown subject
// (SUBJECT_NOT_FOUND) or an envelope refusal, made before the catalog is
// consulted, of a subject Options.InCatalog does not know. Their names are the client's (any text, up to the envelope's
// bound): as labels they would let any authenticated client fill a
// metric's MaxSeries with names of its choosing, and every later label set
// of the catalog's subjects would count under Other.
const Unknown = "_unknown"

// Cursors is the group label of the pull cursors of a subject, summed: a
// cursor is a principal's (its group is "cursor:" and the principal's
// id), and no principal is a label.
const Cursors = "_cursors"

// Options configure Metrics. A nil *Options means the defaults.
type Options struct {
	// Stats, when set, is read at every scrape for the state gauges: lag and
	// leases per group, open quarantine, audit head and last verification,
	// subscriptions. Usually (*pigeon.Engine).Stats.
	Stats func(context.Context) (pigeon.Stats, error)
	// Connections, when set, is read at every scrape for the open WebSocket
	// connections (server.Server.WebSocket().Stats().Open).
	Connections func() int64
	// ConnectionsRefused, when set, is read at every scrape for the
	// connections the server refused as it accepted them, since it began:
	// beyond a connection cap, and from a source locked out for refused
	// credentials (server.Server.ConnStats).
	ConnectionsRefused func() (limit, lockedOut uint64)
	// TransportPanics, when set, is read at every scrape for the panics
	// the WebSocket transports survived since they began, which the
	// engine's Observer does not see: /v1/ws's (an op's worker, a read
	// loop; server.Server.WebSocket().Stats().Panics) and /mesgd's (a
	// connection's handler; mesgd.Server.Stats().Panics, 0 when it is not
	// served).
	TransportPanics func() (websocket, mesgd uint64)
	// InCatalog, when set, reports whether a subject is one of the
	// catalog's: a publish the envelope gate refused keeps its subject label
	// when it is, and counts under Unknown otherwise. Without it every
	// envelope refusal counts under Unknown. Usually
	// func(s string) bool { _, err := e.Subject(s); return err == nil }.
	// It is called on envelope refusals only.
	InCatalog func(subject string) bool
	// MaxSeries bounds the series of each labelled metric (default
	// DefaultMaxSeries); see the package doc.
	MaxSeries int
	// NoRuntime leaves out the Go and process collectors (for a registry
	// that has them already).
	NoRuntime bool
	// ScrapeTimeout bounds one call of Stats (default 5 s).
	ScrapeTimeout time.Duration
}

// Metrics is a pigeon.Observer that counts into Prometheus series.
type Metrics struct {
	maxSeries int
	inCatalog func(string) bool

	decisions    *counters // subject, outcome, code, gate
	events       *counters // event, outcome
	deliveries   *counters // subject
	redeliveries *counters // subject
	exhausted    *counters // subject
	authFailures *counters // method
	quarSkipped  *counters // subject
	repliesLost  *counters // subject
	fanoutPanics *counters // subject
	panics       *counters // where

	latency      *histograms // stage
	commitTime   *histograms // log
	commitRecord *histograms // log
}

var _ pigeon.Observer = (*Metrics)(nil)

// New creates the metrics and registers them, with the state collector and
// (unless NoRuntime) the Go and process collectors, on reg. It fails when
// reg refuses a collector (a name registered twice).
func New(reg prometheus.Registerer, opts *Options) (*Metrics, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxSeries <= 0 {
		o.MaxSeries = DefaultMaxSeries
	}
	if o.ScrapeTimeout <= 0 {
		o.ScrapeTimeout = 5 * time.Second
	}
	m := &Metrics{maxSeries: o.MaxSeries, inCatalog: o.InCatalog}
	counter := func(name, help string, labels ...string) *counters {
		return newCounters(prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "pigeon", Name: name, Help: help}, labels), o.MaxSeries, len(labels))
	}
	m.decisions = counter("decisions_total", "Publish decisions by subject, outcome (allow, deny, quarantine), decision code and the gate that decided.", "subject", "outcome", "code", "gate")
	m.events = counter("audit_events_total", "Audit records written, by event type and outcome.", "event", "outcome")
	m.deliveries = counter("deliveries_total", "Messages handed to consumers (subscriptions and pull receives), by subject.", "subject")
	m.redeliveries = counter("redeliveries_total", "Messages handed out again after a failed, nacked or expired attempt, by subject.", "subject")
	m.exhausted = counter("deliveries_exhausted_total", "Messages whose delivery attempts ran out, by subject.", "subject")
	m.authFailures = counter("auth_failures_total", "Credentials refused, by the method presented (token, jwt, mtls, none).", "method")
	m.quarSkipped = counter("quarantine_skipped_total", "Refusals whose copy was not kept, their principal past the quarantine rate, by subject.", "subject")
	m.repliesLost = counter("replies_not_kept_total", "Replies whose requester was not waiting and that the bounds on replies kept for a later claim left out, by subject.", "subject")
	m.fanoutPanics = counter("fanout_panics_total", "Panics a subject's fan-out survived (a store read, the decoder or the routing of one message; logged with the stack), by subject.", "subject")
	m.panics = counter("panics_total", "Panics the engine survived (each logged with its stack), by where they were: gate, subscription, fanout, observer, authenticator, background, clock.", "where")
	for _, w := range panicSites {
		m.panics.inc(0, w) // present at 0, so that an alert's increase() sees the first
	}
	histogram := func(name, help string, buckets []float64, label string, known ...string) *histograms {
		return newHistograms(prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "pigeon", Name: name, Help: help, Buckets: buckets}, []string{label}), o.MaxSeries, known)
	}
	stages := []string{string(pigeon.StagePublish), string(pigeon.StageNegotiate), string(pigeon.StageDeliver), string(pigeon.StageRequest)}
	logs := []string{string(pigeon.CommitMessages), string(pigeon.CommitAudit)}
	latencyBuckets := prometheus.ExponentialBuckets(0.00001, 4, 12) // 10µs … ~42s
	m.latency = histogram("operation_duration_seconds", "Latency of publish, negotiate, deliver (hand-off to the handler's answer) and request (until the reply).", latencyBuckets, "stage", stages...)
	m.commitTime = histogram("store_commit_duration_seconds", "Duration of one store write, by log (messages, audit).", latencyBuckets, "log", logs...)
	m.commitRecord = histogram("store_commit_records", "Records carried by one store write (the group-commit batch size), by log.", prometheus.ExponentialBuckets(1, 2, 12), "log", logs...)
	cs := []prometheus.Collector{m.decisions.vec, m.events.vec, m.deliveries.vec, m.redeliveries.vec, m.exhausted.vec,
		m.authFailures.vec, m.quarSkipped.vec, m.repliesLost.vec, m.fanoutPanics.vec, m.panics.vec, m.latency.vec, m.commitTime.vec, m.commitRecord.vec, newStateCollector(o)}
	if !o.NoRuntime {
		cs = append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Audited counts r: every record by event and outcome, publish decisions
// by subject, outcome, code and gate, and deliveries.
func (m *Metrics) Audited(r pigeon.AuditRecord) {
	m.events.inc(1, r.Type, r.Outcome)
	switch pigeon.Event(r.Type) {
	case pigeon.EventPublishAccepted, pigeon.EventPublishDuplicate, pigeon.EventPublishDenied, pigeon.EventPublishFailed:
		code := r.Code
		if code == "" {
			code = "OK"
		}
		subject := r.Subject
		if code == string(pigeon.CodeSubjectNotFound) ||
			r.Gate == pigeon.GateEnvelope && (m.inCatalog == nil || !m.inCatalog(subject)) {
			subject = Unknown
		}
		m.decisions.inc(1, subject, r.Outcome, code, r.Gate)
	case pigeon.EventDeliveryDispatched:
		n := r.Count
		if n == 0 {
			n = 1
		}
		m.deliveries.inc(float64(n), r.Subject)
	case pigeon.EventDeliveryExhausted:
		m.exhausted.inc(1, r.Subject)
	}
}

// Took observes one operation's latency.
func (m *Metrics) Took(stage pigeon.Stage, _ string, d time.Duration) {
	m.latency.observe(d.Seconds(), string(stage))
}

// Committed observes one store write.
func (m *Metrics) Committed(log pigeon.CommitLog, records int, d time.Duration) {
	m.commitTime.observe(d.Seconds(), string(log))
	m.commitRecord.observe(float64(records), string(log))
}

// Noted counts a redelivery, an authentication failure, a quarantine
// copy not kept, a reply not kept for a later claim, a panic the
// fan-out survived (by subject) or any panic the engine survived (by
// where; a where not among the engine's counts under Other).
func (m *Metrics) Noted(n pigeon.Note, label string) {
	switch n {
	case pigeon.NoteRedelivery:
		m.redeliveries.inc(1, label)
	case pigeon.NoteAuthFailure:
		m.authFailures.inc(1, label)
	case pigeon.NoteQuarantineSkipped:
		m.quarSkipped.inc(1, label)
	case pigeon.NoteReplyNotKept:
		m.repliesLost.inc(1, label)
	case pigeon.NoteFanoutPanic:
		m.fanoutPanics.inc(1, label)
	case pigeon.NotePanic:
		if !slices.Contains(panicSites, label) {
			label = Other
		}
		m.panics.inc(1, label)
	}
}

// panicSites are the labels of pigeon.NotePanic.
var panicSites = []string{pigeon.PanicGate, pigeon.PanicSubscription, pigeon.PanicFanout, pigeon.PanicObserver,
	pigeon.PanicAuthenticator, pigeon.PanicBackground, pigeon.PanicClock}

// labels is a label set of up to four values, a comparable map key.
type labels [4]string

func key(values []string) labels {
	var k labels
	copy(k[:], values)
	return k
}

// series resolves label sets to the series of one vector, caching each
// and capping their number at max (beyond it, every label is Other).
//
// The cache is copy-on-write: readers load the current map through an
// atomic pointer and never lock or write shared memory; a label set seen
// for the first time takes the mutex, copies the map with the new entry
// and publishes the copy. Series are created at most max times, so the
// copies cost O(max²) over the process's life and nothing once the label
// sets are known.
type series[T any] struct {
	m    atomic.Pointer[map[labels]T] // read-only once published
	mu   sync.Mutex                   // serialises writers
	max  int
	n    int // label count
	make func(values ...string) T
}

// init readies s, in place (it holds an atomic and a mutex).
func (s *series[T]) init(max, nLabels int, make func(values ...string) T) {
	s.max, s.n, s.make = max, nLabels, make
	s.m.Store(&map[labels]T{})
}

func (s *series[T]) get(values []string) T {
	k := key(values)
	if c, ok := (*s.m.Load())[k]; ok {
		return c
	}
	return s.add(k, values)
}

// add resolves a label set not in the cache (or added since the caller
// looked) and publishes a copy of the cache that holds it.
func (s *series[T]) add(k labels, values []string) T {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.m.Load()
	if c, ok := cur[k]; ok {
		return c
	}
	if len(cur) >= s.max-1 { // one series is kept for Other
		var o labels
		for i := range s.n {
			o[i] = Other
		}
		if c, ok := cur[o]; ok {
			return c
		}
		k, values = o, o[:s.n]
	}
	// values stays on the caller's stack. Prometheus panics on a label
	// value that is not UTF-8; the engine sends none, but a panic here
	// would be on its publish path: such a value is made valid.
	vs := make([]string, len(values))
	for i, v := range values {
		vs[i] = strings.ToValidUTF8(v, "\uFFFD")
	}
	c := s.make(vs...)
	next := make(map[labels]T, len(cur)+1)
	maps.Copy(next, cur)
	next[k] = c
	s.m.Store(&next)
	return c
}

type counters struct {
	vec *prometheus.CounterVec
	series[prometheus.Counter]
}

func newCounters(vec *prometheus.CounterVec, max, nLabels int) *counters {
	c := &counters{vec: vec}
	c.init(max, nLabels, vec.WithLabelValues)
	return c
}

// inc adds v to the series of values (in label order).
func (c *counters) inc(v float64, values ...string) { c.get(values).Add(v) }

// histograms is a histogram vector of one label whose usual values (the
// engine's stages, its logs) are resolved when it is made: their lookup
// takes no lock.
type histograms struct {
	vec   *prometheus.HistogramVec
	known map[string]prometheus.Observer // read-only once made
	series[prometheus.Observer]
}

func newHistograms(vec *prometheus.HistogramVec, max int, known []string) *histograms {
	h := &histograms{vec: vec, known: make(map[string]prometheus.Observer, len(known))}
	for _, k := range known {
		h.known[k] = vec.WithLabelValues(k)
	}
	h.init(max-len(known), 1, vec.WithLabelValues)
	return h
}

func (h *histograms) observe(v float64, value string) {
	if o, ok := h.known[value]; ok {
		o.Observe(v)
		return
	}
	h.get([]string{value}).Observe(v)
}
