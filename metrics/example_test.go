package metrics_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"pigeon"
	"pigeon/demo"
	"pigeon/metrics"
)

// An application registers Pigeon's metrics on its own registry and
// serves them beside its own.
func ExampleNew() {
	reg := prometheus.NewRegistry()
	var e *pigeon.Engine
	m, err := metrics.New(reg, &metrics.Options{
		Stats: func(ctx context.Context) (pigeon.Stats, error) { return e.Stats(ctx) },
	})
	if err != nil {
		panic(err)
	}
	e, err = pigeon.New(context.Background(), &pigeon.Options{Catalog: demo.Catalog(), Observer: m})
	if err != nil {
		panic(err)
	}
	defer e.Shutdown(context.Background())
	mux := http.NewServeMux() // the application's
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() == "pigeon_audit_records" {
			fmt.Println(f.GetName(), f.GetMetric()[0].GetGauge().GetValue() > 0)
		}
	}
	// Output: pigeon_audit_records true
}
