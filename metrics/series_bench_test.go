package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkSeriesLookupParallel is the lookup of a known series alone (no
// update), from every P at once: what resolving labels costs the hot path
// under concurrency.
func BenchmarkSeriesLookupParallel(b *testing.B) {
	m, err := New(prometheus.NewRegistry(), &Options{NoRuntime: true})
	if err != nil {
		b.Fatal(err)
	}
	values := []string{"payments.authorize", "allow", "OK", ""}
	m.decisions.get(values)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if m.decisions.get(values) == nil {
				b.Fatal("no series")
			}
		}
	})
}
