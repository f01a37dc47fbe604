package ws_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"pigeon"
	"pigeon/demo"
	"pigeon/store/wal"
	"pigeon/transport/ws"
)

// BenchmarkSyncDurableP50 is the latency of one synchronous durable
// publish over WebSocket (the write-ahead log on its defaults: group
// commit, fsynced before the answer) beside the same publish in process on
// the same engine and a raw write of 300 bytes plus fsync in the same
// directory: each iteration times one of each in turn, so that all three
// see the disk at the same moments. It reports the three p50s, what the
// WebSocket adds to the in-process publish at p50 (ws-added-µs), and the
// WebSocket publish's p50 over the raw fsync's (ws/fsync).
func BenchmarkSyncDurableP50(b *testing.B) {
	dir := b.TempDir()
	st, err := wal.Open(filepath.Join(dir, "data"), nil)
	if err != nil {
		b.Fatal(err)
	}
	v := newEnv(b, &ws.Options{PublishRate: -1}, func(o *pigeon.Options) {
		o.ContractTTL = 24 * time.Hour
		o.Store = st
	})
	subjects := []string{"payments.authorize"}
	remote := v.dial(b, "checkout-token", subjects)
	ctx := context.Background()
	local, err := v.e.Connect(ctx, "checkout-token", subjects)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = local.Close(ctx) }()
	f, err := os.Create(filepath.Join(dir, "fsync"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	raw := make([]byte, 300)
	m := demo.Payment("o")
	publish := func(s pigeon.Session, i int) time.Duration {
		m.IdempotencyKey = "k-" + strconv.Itoa(i)
		t0 := time.Now()
		if _, err := s.Publish(ctx, m); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	var overWS, inProc, fsync []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		overWS = append(overWS, publish(remote, 2*i))
		inProc = append(inProc, publish(local, 2*i+1))
		t0 := time.Now()
		if _, err := f.Write(raw); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		fsync = append(fsync, time.Since(t0))
	}
	b.StopTimer()
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2]) / float64(time.Microsecond)
	}
	w, l, r := p50(overWS), p50(inProc), p50(fsync)
	b.ReportMetric(w, "ws-p50-µs")
	b.ReportMetric(l, "inproc-p50-µs")
	b.ReportMetric(r, "fsync-p50-µs")
	b.ReportMetric(w-l, "ws-added-µs")
	b.ReportMetric(w/r, "ws/fsync")
}
