package wal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pigeon/store"
)

// BenchmarkAppend measures Append of a 300-byte message to one subject in
// each sync mode, from one goroutine and from many (RunParallel; use -cpu
// to vary the number). Under SyncBatch concurrent appends share fsyncs.
func BenchmarkAppend(b *testing.B) {
	body := make([]byte, 300)
	for _, mode := range []SyncMode{SyncAlways, SyncBatch, SyncNone} {
		b.Run(mode.String(), func(b *testing.B) {
			b.Run("serial", func(b *testing.B) {
				s := open(b, b.TempDir(), &Options{Sync: mode})
				ctx := context.Background()
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					m := store.Message{Subject: "bench", ID: fmt.Sprint("m", i), Time: time.Now(), Body: body}
					if _, _, err := s.Append(ctx, m); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("parallel", func(b *testing.B) {
				s := open(b, b.TempDir(), &Options{Sync: mode})
				ctx := context.Background()
				var n atomic.Int64
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				b.SetParallelism(16) // 16 goroutines per CPU: a busy broker
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						m := store.Message{Subject: "bench", ID: fmt.Sprint("m", n.Add(1)), Time: time.Now(), Body: body}
						if _, _, err := s.Append(ctx, m); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		})
	}
}

// BenchmarkAppendPrealloc measures one synchronous Append (SyncAlways,
// one goroutine: a write and an fsync each) with the tail segment
// preallocated, as by default, and without (Options.NoPreallocate); compare
// with BenchmarkFsync, the same write and fsync on a file that grows.
func BenchmarkAppendPrealloc(b *testing.B) {
	body := make([]byte, 300)
	for _, tc := range []struct {
		name string
		off  bool
	}{{"on", false}, {"off", true}} {
		b.Run(tc.name, func(b *testing.B) {
			s := open(b, b.TempDir(), &Options{Sync: SyncAlways, NoPreallocate: tc.off})
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				m := store.Message{Subject: "bench", ID: fmt.Sprint("m", i), Time: time.Now(), Body: body}
				if _, _, err := s.Append(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFsync measures the raw latency of the disk under the temp
// directory: write 300 bytes and fsync, as SyncAlways does per Append.
func BenchmarkFsync(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "fsync"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 300)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRead measures reading a backlog in pages of 100.
func BenchmarkRead(b *testing.B) {
	s := open(b, b.TempDir(), &Options{Sync: SyncNone})
	ctx := context.Background()
	const n = 20000
	for i := range n {
		if _, _, err := s.Append(ctx, store.Message{Subject: "r", ID: fmt.Sprint(i), Time: base, Body: make([]byte, 300)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	from := uint64(1)
	for b.Loop() {
		ms, err := s.Read(ctx, "r", from, 100)
		if err != nil || len(ms) == 0 {
			b.Fatal(err)
		}
		from = ms[len(ms)-1].Seq%n + 1
	}
}

// BenchmarkAppendPublishers is 64 goroutines appending 300-byte messages
// to one subject under SyncBatch, each doing think µs of work between
// appends (a publish's gates, or a network round trip), per commit delay:
// off, a fixed 100µs, and the adaptive default. It reports appends/s and
// appends per fsync.
func BenchmarkAppendPublishers(b *testing.B) {
	body := make([]byte, 300)
	for _, think := range []time.Duration{0, 50 * time.Microsecond, 200 * time.Microsecond, time.Millisecond} {
		for _, c := range []struct {
			name  string
			delay time.Duration
		}{{"off", -1}, {"100us", 100 * time.Microsecond}, {"adaptive", 0}} {
			b.Run(fmt.Sprintf("think=%v/delay=%s", think, c.name), func(b *testing.B) {
				s := open(b, b.TempDir(), &Options{BatchDelay: c.delay})
				ctx := context.Background()
				var n atomic.Int64
				b.ResetTimer()
				var wg sync.WaitGroup
				for range 64 {
					wg.Go(func() {
						for {
							i := n.Add(1)
							if i > int64(b.N) {
								return
							}
							if think > 0 {
								spin(think)
							}
							m := store.Message{Subject: "bench", ID: fmt.Sprint("m", i), Time: time.Now(), Body: body}
							if _, _, err := s.Append(ctx, m); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				st := s.CommitStats()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
				b.ReportMetric(float64(st.MessageRecords)/float64(st.MessageBatches), "appends/fsync")
			})
		}
	}
}

// spin stands for d of a caller's own work between writes: it sleeps,
// since on two CPUs burning d would measure the scheduler instead.
func spin(d time.Duration) { time.Sleep(d) }
