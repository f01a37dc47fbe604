package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"pigeon/metrics"
)

// TestTransportPanics: Options.TransportPanics is read at every scrape
// into pigeon_transport_panics_total, by transport, both present at 0
// from the start, so that an alert's increase() sees the first.
func TestTransportPanics(t *testing.T) {
	reg := prometheus.NewRegistry()
	var websocket, mesgd uint64
	_, err := metrics.New(reg, &metrics.Options{NoRuntime: true, TransportPanics: func() (uint64, uint64) { return websocket, mesgd }})
	require.NoError(t, err)
	for _, tr := range []string{"websocket", "mesgd"} {
		v, ok := value(scrape(t, reg), "pigeon_transport_panics_total", map[string]string{"transport": tr})
		require.True(t, ok, tr)
		require.Zero(t, v, tr)
	}
	websocket, mesgd = 2, 5
	fams := scrape(t, reg)
	v, _ := value(fams, "pigeon_transport_panics_total", map[string]string{"transport": "websocket"})
	require.Equal(t, 2.0, v)
	v, _ = value(fams, "pigeon_transport_panics_total", map[string]string{"transport": "mesgd"})
	require.Equal(t, 5.0, v)
}
