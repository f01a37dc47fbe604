package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"pigeon"
	"pigeon/internal/logctx"
	"pigeon/metrics"
	"pigeon/policy"
	"pigeon/server"
)

// newLogger is the server's logger: text or JSON on w at the configured
// level (-v means debug; "" means text at info), with the request id of
// each request on its lines.
func newLogger(cfg serveConfig, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if cfg.logLevel == "" {
		cfg.logLevel = "info"
	}
	if err := level.UnmarshalText([]byte(cfg.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level must be debug, info, warn or error, not %q", cfg.logLevel)
	}
	if cfg.verbose {
		level = slog.LevelDebug
	}
	ho := &slog.HandlerOptions{Level: level}
	w = terminalSafeRecords{w} // a program's log line, a principal: others' text
	var h slog.Handler
	switch cfg.logFormat {
	case "text", "":
		h = slog.NewTextHandler(w, ho)
	case "json":
		h = slog.NewJSONHandler(w, ho)
	default:
		return nil, fmt.Errorf("--log-format must be text or json, not %q", cfg.logFormat)
	}
	return slog.New(logctx.Handler(h)), nil
}

// observation is what serve wires for operators: the Prometheus registry
// with the engine's metrics, and the console's feed, both observing the
// engine.
type observation struct {
	reg     *prometheus.Registry
	feed    *server.Feed
	metrics *metrics.Metrics
	// engine and srv are set once they exist; the scrape reads them.
	engine *pigeon.Engine
	srv    *server.Server
}

func newObservation() (*observation, error) {
	o := &observation{reg: prometheus.NewRegistry(), feed: server.NewFeed(0)}
	m, err := metrics.New(o.reg, &metrics.Options{
		Stats: func(ctx context.Context) (pigeon.Stats, error) {
			if o.engine == nil {
				return pigeon.Stats{}, errors.New("not started")
			}
			return o.engine.Stats(ctx)
		},
		// A refusal of a subject the catalog does not hold counts under
		// metrics.Unknown, not under the name a client chose.
		InCatalog: o.inCatalog,
		Connections: func() int64 {
			if o.srv == nil {
				return 0
			}
			return o.srv.WebSocket().Stats().Open
		},
		ConnectionsRefused: func() (uint64, uint64) {
			if o.srv == nil {
				return 0, 0
			}
			st := o.srv.ConnStats()
			return st.Refused, st.LockedOut
		},
		TransportPanics: func() (uint64, uint64) {
			if o.srv == nil {
				return 0, 0
			}
			var m int64
			if ms := o.srv.Mesgd(); ms != nil {
				m = ms.Stats().Panics
			}
			return uint64(o.srv.WebSocket().Stats().Panics), uint64(m)
		},
	})
	if err != nil {
		return nil, err
	}
	o.metrics = m
	o.feed.SetInCatalog(o.inCatalog)
	return o, nil
}

// inCatalog reports whether the engine's catalog holds subject (false
// before the engine exists): the metrics and the console feed count a
// refusal of any other under one name, not under the name a client chose.
func (o *observation) inCatalog(subject string) bool {
	if o.engine == nil {
		return false
	}
	_, err := o.engine.Subject(subject)
	return err == nil
}

// observer is the engine's Observer: the metrics and the console's feed.
func (o *observation) observer() pigeon.Observer { return pigeon.Observers(o.metrics, o.feed) }

// handler serves the registry in the Prometheus exposition formats.
func (o *observation) handler() http.Handler {
	return promhttp.HandlerFor(o.reg, promhttp.HandlerOpts{Registry: o.reg})
}

// serveMetrics serves /metrics alone on addr until stop; it returns the
// URL of /metrics. A failure to listen returns a stop that does nothing.
func serveMetrics(ctx context.Context, addr string, h http.Handler, logger *slog.Logger) (url string, stop func(context.Context) error, err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", func(context.Context) error { return nil }, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelDebug), BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() { _ = hs.Serve(l) }()
	return "http://" + l.Addr().String() + "/metrics", hs.Shutdown, nil
}

// catalogCmd runs `pigeon catalog asyncapi DIR`: the policy directory as
// an AsyncAPI 3 document on stdout.
func catalogCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 || args[0] != "asyncapi" {
		fmt.Fprintln(stderr, "usage: pigeon catalog asyncapi DIR")
		return 2
	}
	c, _, err := loadCatalog(args[1])
	if err != nil {
		fmt.Fprintf(stderr, "pigeon catalog asyncapi: %s\n", printable(err.Error()))
		return 1
	}
	title := "Pigeon catalog " + strings.TrimRight(args[1], "/")
	doc, err := policy.AsyncAPI(c, policy.AsyncAPIInfo{Title: title, Version: "1.0.0"})
	if err != nil {
		fmt.Fprintf(stderr, "pigeon catalog asyncapi: %s\n", printable(err.Error()))
		return 1
	}
	_, _ = stdout.Write(append(terminalSafeJSON(doc), '\n')) // names and texts of the policy files
	return 0
}
