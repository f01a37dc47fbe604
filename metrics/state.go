package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// stateCollector reads the engine's state at scrape time.
type stateCollector struct {
	o Options

	lag, inFlight, quarantineOpen, auditRecords, subscriptions, connections, refused, contracts,
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
		verifyOK:        d("audit_last_verify_ok", "1 when the last audit chain verification held, 0 when it failed; absent before one."),
		verifyTime:      d("audit_last_verify_timestamp_seconds", "When the audit chain was last verified (Unix time)."),
		verifyRecords:   d("audit_last_verify_records", "Records the last audit chain verification checked."),
		scrapeErrors:    d("stats_scrape_error", "1 when reading the engine's state failed during this scrape."),
		subjectMessages: d("subject_messages", "Retained messages, by subject of the catalog.", "subject"),
		subjectBytes:    d("subject_bytes", "Length of the retained messages' stored envelopes, by subject with retention.maxBytes.", "subject"),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.lag, c.inFlight, c.quarantineOpen, c.auditRecords, c.subscriptions, c.contracts,
		c.connections, c.refused, c.verifyOK, c.verifyTime, c.verifyRecords, c.scrapeErrors, c.subjectMessages, c.subjectBytes} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
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
	if c.o.Stats == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.o.ScrapeTimeout)
	defer cancel()
	st, err := c.o.Stats(ctx)
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
	// Groups beyond MaxSeries are summed under Other. A group of a subject
	// no longer in the catalog has no series: nothing can consume it, so
	// a lag alert on it could never clear.
	var otherLag, otherInFlight float64
	n := 0
	for _, g := range st.Groups {
		if g.NotInCatalog {
			continue
		}
		if n++; n < c.o.MaxSeries {
			gauge(c.lag, float64(g.Lag), g.Subject, g.Group)
			gauge(c.inFlight, float64(g.InFlight), g.Subject, g.Group)
			continue
		}
		otherLag += float64(g.Lag)
		otherInFlight += float64(g.InFlight)
	}
	if n >= c.o.MaxSeries {
		gauge(c.lag, otherLag, Other, Other)
		gauge(c.inFlight, otherInFlight, Other, Other)
	}
}
