package pigeon_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pigeon"
	"pigeon/demo"
	"pigeon/store/wal"
	"pigeon/transport/transporttest"
)

// durableBench is an engine on a WAL store in a temp dir, with the demo
// catalog, and a publishing session on payments.authorize.
func durableBench(b *testing.B, mode wal.SyncMode) (*wal.Store, pigeon.Session, string) {
	b.Helper()
	dir := b.TempDir()
	st, err := wal.Open(filepath.Join(dir, "data"), &wal.Options{Sync: mode})
	if err != nil {
		b.Fatal(err)
	}
	opts := transporttest.Options()
	opts.Store, opts.ContractTTL = st, 24*time.Hour
	e, err := pigeon.New(context.Background(), opts)
	if err != nil {
		_ = st.Close(context.Background())
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Shutdown(context.Background()); _ = st.Close(context.Background()) })
	return st, benchSession(b, e, "checkout-token", "payments.authorize"), dir
}

// BenchmarkPublishDurable is BenchmarkPublishGoverned on the WAL store, per
// sync mode, from one goroutine and from 64 concurrent publishers on one
// session. Every publish passes every gate and is audited; under "batch"
// and "always" its message is on disk before Publish returns. It reports
// msgs/s and the mean number of publishes that shared one message-log
// write (msgs/batch) and audit records per audit-log write
// (audit/batch).
func BenchmarkPublishDurable(b *testing.B) {
	for _, mode := range []wal.SyncMode{wal.SyncAlways, wal.SyncBatch, wal.SyncNone} {
		for _, pubs := range []int{1, 64} {
			name := mode.String() + "/single"
			if pubs > 1 {
				name = mode.String() + "/pub" + strconv.Itoa(pubs)
			}
			b.Run(name, func(b *testing.B) {
				st, s, _ := durableBench(b, mode)
				ctx := context.Background()
				var n atomic.Int64
				before := st.CommitStats()
				b.ReportAllocs()
				b.ResetTimer()
				var wg sync.WaitGroup
				for range pubs {
					wg.Go(func() {
						m := demo.Payment("o")
						for {
							i := n.Add(1)
							if i > int64(b.N) {
								return
							}
							m.IdempotencyKey = "k-" + strconv.FormatInt(i, 10)
							if _, err := s.Publish(ctx, m); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				after := st.CommitStats()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
				if mb := after.MessageBatches - before.MessageBatches; mb > 0 {
					b.ReportMetric(float64(after.MessageRecords-before.MessageRecords)/float64(mb), "msgs/batch")
				}
				if ab := after.AuditBatches - before.AuditBatches; ab > 0 {
					b.ReportMetric(float64(after.AuditRecords-before.AuditRecords)/float64(ab), "audit/batch")
				}
			})
		}
	}
}

// BenchmarkPublishDurableP50 is the latency of one synchronous durable
// publish (SyncBatch, the default, from one publisher) beside the raw
// latency of the disk: each iteration times one publish and then one
// write of 300 bytes plus fsync on a file in the same temp directory, so
// both see the same disk at the same moments. It reports the publish's
// p50 and p99, the raw fsync's p50 and their ratio (p50/fsync).
func BenchmarkPublishDurableP50(b *testing.B) {
	_, s, dir := durableBench(b, wal.SyncBatch)
	f, err := os.Create(filepath.Join(dir, "fsync"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 300)
	ctx := context.Background()
	m := demo.Payment("o")
	var pub, raw []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		m.IdempotencyKey = "k-" + strconv.Itoa(i)
		t0 := time.Now()
		if _, err := s.Publish(ctx, m); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		pub, raw = append(pub, t1.Sub(t0)), append(raw, time.Since(t1))
	}
	b.StopTimer()
	slices.Sort(pub)
	slices.Sort(raw)
	q := func(d []time.Duration, p float64) float64 {
		return float64(d[int(p*float64(len(d)-1))]) / float64(time.Microsecond)
	}
	b.ReportMetric(q(pub, 0.5), "p50-µs")
	b.ReportMetric(q(pub, 0.99), "p99-µs")
	b.ReportMetric(q(raw, 0.5), "fsync-p50-µs")
	b.ReportMetric(q(pub, 0.5)/q(raw, 0.5), "p50/fsync")
}
