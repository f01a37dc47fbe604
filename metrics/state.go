package metrics

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"pigeon"
)

// stateCollector reads the engine's state at scrape time.
type stateCollector struct {
	o Options

	mu      sync.Mutex
	reading *statsReading // the reading in flight, nil when none

	lag, inFlight, quarantineOpen, auditRecords, subscriptions, connections, refused, transportPanics, contracts,
	verifyOK, verifyTime, verifyRecords, scrapeErrors, subjectMessages, subjectBytes *prometheus.Desc
}

func newStateCollector(o Options) *stateCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("pigeon_"+name, help, labels, nil)
	}
	return &stateCollector{o: o,
		lag:             d("consumer_lag", "Retained messages past a consumer group's floor, by subject and group.", "subject", "group"),
		inFlight:        d("leases_in_flight", "Leases held (delivered, not yet settled), by subject and group.", "subject", "group"),
		quarantineOpen:  d("quarantine_open", "Quarantine records not yet released."),
		auditRecords:    d("audit_records", "Sequence of the last audit record written."),
		subscriptions:   d("subscriptions", "Live subscriptions (in process and over WebSocket)."),
		contracts:       d("contracts_live", "Negotiated contracts in force (not expired, not revoked)."),
		connections:     d("websocket_connections", "Open WebSocket connections."),
		refused:         d("connections_refused_total", "Connections refused as they were accepted, by reason: limit (a connection cap) or locked_out (a source locked out for refused credentials).", "reason"),
		transportPanics: d("transport_panics_total", "Panics a WebSocket transport survived (each logged with its stack, its connection closed with 1011), by transport: websocket (/v1/ws) or mesgd (/mesgd).", "transport"),
		verifyOK:        d("audit_last_verify_ok", "1 when the last audit chain verification held, 0 when it failed; absent before one."),
		verifyTime:      d("audit_last_verify_timestamp_seconds", "When the audit chain was last verified (Unix time)."),
		verifyRecords:   d("audit_last_verify_records", "Records the last audit chain verification checked."),
		scrapeErrors:    d("stats_scrape_error", "1 when reading the engine's state failed during this scrape."),
		subjectMessages: d("subject_messages", "Retained messages, by subject of the catalog.", "subject"),
		subjectBytes:    d("subject_bytes", "Length of the retained messages' stored envelopes, by subject with retention.maxBytes.", "subject"),
	}
}

// statsReading is one call of Options.Stats, shared by the scrapes that
// arrive while it runs.
type statsReading struct {
	done chan struct{} // closed once st and err are set
	st   pigeon.Stats
	err  error
}

// stats reads the engine's state: a scrape that arrives while another's
// reading is in flight waits for it and shares its result (read-only)
// rather than starting its own. The route that serves the metrics may need
// no credential, and a reading lists the quarantine, every group and each
// subject's bounds: a flood of scrapes costs one reading at a time.
func (c *stateCollector) stats() (pigeon.Stats, error) {
	c.mu.Lock()
	if r := c.reading; r != nil {
		c.mu.Unlock()
		<-r.done
		return r.st, r.err
	}
	r := &statsReading{done: make(chan struct{})}
	c.reading = r
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.reading = nil
		c.mu.Unlock()
		close(r.done)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), c.o.ScrapeTimeout)
	defer cancel()
	r.err = errStatsPanicked // until Stats returns
	r.st, r.err = c.o.Stats(ctx)
	return r.st, r.err
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.lag, c.inFlight, c.quarantineOpen, c.auditRecords, c.subscriptions, c.contracts,
		c.connections, c.refused, c.transportPanics, c.verifyOK, c.verifyTime, c.verifyRecords, c.scrapeErrors, c.subjectMessages, c.subjectBytes} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		// A label value that is not UTF-8 (a catalog subject an embedding
		// application named so) is made valid: the registry refuses the
		// series, and the whole scrape fails with it.
		for i, l := range labels {
			labels[i] = strings.ToValidUTF8(l, "\uFFFD")
		}
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if c.o.Connections != nil {
		gauge(c.connections, float64(c.o.Connections()))
	}
	if c.o.ConnectionsRefused != nil {
		limit, locked := c.o.ConnectionsRefused()
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(limit), "limit")
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(locked), "locked_out")
	}
	if c.o.TransportPanics != nil {
		websocket, mesgd := c.o.TransportPanics()
		ch <- prometheus.MustNewConstMetric(c.transportPanics, prometheus.CounterValue, float64(websocket), "websocket")
		ch <- prometheus.MustNewConstMetric(c.transportPanics, prometheus.CounterValue, float64(mesgd), "mesgd")
	}
	if c.o.Stats == nil {
		return
	}
	st, err := c.stats()
	if err != nil {
		gauge(c.scrapeErrors, 1)
		return
	}
	gauge(c.scrapeErrors, 0)
	gauge(c.quarantineOpen, float64(st.QuarantineOpen))
	gauge(c.auditRecords, float64(st.AuditRecords))
	gauge(c.subscriptions, float64(st.Subscriptions))
	gauge(c.contracts, float64(st.Contracts))
	if v := st.LastVerify; !v.Time.IsZero() {
		ok := 0.0
		if v.OK {
			ok = 1
		}
		gauge(c.verifyOK, ok)
		gauge(c.verifyTime, float64(v.Time.UnixNano())/1e9)
		gauge(c.verifyRecords, float64(v.Verified))
	}
	// The catalog's subjects are the operator's, but bounded like any
	// label: beyond MaxSeries they are summed under Other. A subject no
	// longer in the catalog has no series: its label would outlive the
	// policy (the console and Stats list it, marked NotInCatalog).
	var otherMessages, otherBytes float64
	i := 0
	for _, ss := range st.Subjects {
		if ss.NotInCatalog {
			continue
		}
		if i++; i < c.o.MaxSeries {
			gauge(c.subjectMessages, float64(ss.Messages), ss.Subject)
			if ss.MaxBytes > 0 {
				gauge(c.subjectBytes, float64(ss.Bytes), ss.Subject)
			}
			continue
		}
		otherMessages += float64(ss.Messages)
		otherBytes += float64(ss.Bytes)
	}
	if i >= c.o.MaxSeries {
		gauge(c.subjectMessages, otherMessages, Other)
		gauge(c.subjectBytes, otherBytes, Other)
	}
	// Groups beyond MaxSeries are summed under Other; the series are
	// shared fairly among the subjects (sharedSeries), since group names
	// are the consumers'. A group of a subject no longer in the catalog
	// has no series: nothing can consume it, so a lag alert on it could
	// never clear. The groups of one name (one per selection) are summed
	// under it, and a subject's pull cursors (one per principal, named by
	// its id) under Cursors.
	groups := slices.DeleteFunc(groupsSummed(st.Groups), func(g pigeon.GroupStats) bool { return g.NotInCatalog })
	own := sharedSeries(groups, c.o.MaxSeries)
	var otherLag, otherInFlight float64
	for i, g := range groups {
		if own[i] {
			gauge(c.lag, float64(g.Lag), g.Subject, g.Group)
			gauge(c.inFlight, float64(g.InFlight), g.Subject, g.Group)
			continue
		}
		otherLag += float64(g.Lag)
		otherInFlight += float64(g.InFlight)
	}
	if len(groups) >= c.o.MaxSeries {
		gauge(c.lag, otherLag, Other, Other)
		gauge(c.inFlight, otherInFlight, Other, Other)
	}
}

// sharedSeries reports which groups (listed subject by subject) have a
// series of their own when a metric holds at most max: all of them when
// they fit, otherwise max-1 (one is Other's) shared among the subjects as
// evenly as their groups allow, each subject's first groups in its
// order. A consumer that starts group after group on one subject (names
// are the consumers', and stored groups outlive their subscribers) then
// fills that subject's share only: the groups of every other subject keep
// their series, and their lag alerts.
func sharedSeries(groups []pigeon.GroupStats, max int) []bool {
	own := make([]bool, len(groups))
	if len(groups) < max {
		for i := range own {
			own[i] = true
		}
		return own
	}
	var order []string // subjects, in the order of their first group
	count := map[string]int{}
	for _, g := range groups {
		if count[g.Subject] == 0 {
			order = append(order, g.Subject)
		}
		count[g.Subject]++
	}
	// Water-filling: the largest per-subject quota q such that the
	// subjects' min(count, q) fit the budget; what is left goes one more
	// each to the subjects past q, in order.
	budget := max - 1
	sizes := make([]int, 0, len(order))
	for _, s := range order {
		sizes = append(sizes, count[s])
	}
	slices.Sort(sizes)
	left, quota := budget, budget
	for i, n := range sizes {
		if share := left / (len(sizes) - i); n > share {
			quota = share
			break
		}
		left -= n
	}
	take := make(map[string]int, len(order))
	used := 0
	for _, s := range order {
		take[s] = min(count[s], quota)
		used += take[s]
	}
	for _, s := range order {
		if used >= budget {
			break
		}
		if take[s] < count[s] {
			take[s]++
			used++
		}
	}
	for i, g := range groups {
		if take[g.Subject] > 0 {
			take[g.Subject]--
			own[i] = true
		}
	}
	return own
}

// errStatsPanicked is a reading's error while Stats runs: the waiters of a
// reading whose Stats panicked get it.
var errStatsPanicked = pigeon.NewError(pigeon.CodeInternal, "reading the engine's state failed")

// groupsSummed is groups as the metrics label them, each at the place of
// its subject's first: the groups of a subject that share a name (those
// whose members select, one per selection: Name) summed under it, and the
// pull cursors (one per principal) summed under Cursors. No label holds a
// selector, a filter, a grant's scope or a principal.
func groupsSummed(groups []pigeon.GroupStats) []pigeon.GroupStats {
	out := make([]pigeon.GroupStats, 0, len(groups))
	type key struct{ subject, group string }
	at := make(map[key]int, len(groups)) // index in out
	for _, g := range groups {
		g.Group = g.Name()
		if g.IsCursor() {
			g.Group = Cursors
		}
		if i, ok := at[key{g.Subject, g.Group}]; ok {
			out[i].Lag += g.Lag
			out[i].InFlight += g.InFlight
			continue
		}
		at[key{g.Subject, g.Group}] = len(out)
		out = append(out, g)
	}
	return out
}
