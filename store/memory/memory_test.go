package memory_test

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return memory.New(nil) }, storetest.Features{})
}

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func TestNewDoesNotChangeOptions(t *testing.T) {
	opts := &memory.Options{IdempotencyGrace: -time.Second}
	memory.New(opts)
	require.Equal(t, -time.Second, opts.IdempotencyGrace)
}

func TestIdempotencyEntriesAreEvicted(t *testing.T) {
	const (
		n    = 100_000
		step = time.Millisecond
		ttl  = 50 * time.Millisecond
	)
	cases := []struct {
		name  string
		grace time.Duration
		limit int // live entries allowed: what the ttl and grace cover, plus one
	}{
		{"no grace", 0, int((ttl)/step) + 1},
		{"with grace", 20 * time.Millisecond, int((ttl+20*time.Millisecond)/step) + 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := memory.New(&memory.Options{IdempotencyGrace: c.grace})
			ctx := t.Context()
			peak := 0
			for i := range n {
				now := t0.Add(time.Duration(i) * step)
				_, dup, err := s.Append(ctx, store.Message{
					Subject: "a", ID: "m" + strconv.Itoa(i), Time: now,
					IdemKey: "k" + strconv.Itoa(i), IdemExpires: now.Add(ttl),
				})
				if err != nil || dup {
					t.Fatalf("Append %d: dup %v, err %v", i, dup, err)
				}
				peak = max(peak, s.IdempotencyEntries())
			}
			require.LessOrEqual(t, peak, c.limit, "live idempotency entries must stay bounded")
			require.GreaterOrEqual(t, s.IdempotencyEntries(), int(ttl/step), "entries that have not expired are kept")

			// The newest keys still deduplicate.
			last := t0.Add((n - 1) * step)
			got, dup, err := s.Append(ctx, store.Message{
				Subject: "a", ID: "again", Time: last, IdemKey: "k" + strconv.Itoa(n-1), IdemExpires: last.Add(ttl),
			})
			require.NoError(t, err)
			require.True(t, dup)
			require.Equal(t, "m"+strconv.Itoa(n-1), got.ID)
		})
	}
}

func TestIdempotencyReclaimedKeyIsNotEvictedEarly(t *testing.T) {
	s := memory.New(nil)
	ctx := t.Context()
	appendKey := func(id string, at, ttl time.Duration) (store.Message, bool) {
		m, dup, err := s.Append(ctx, store.Message{
			Subject: "a", ID: id, Time: t0.Add(at), IdemKey: "k", IdemExpires: t0.Add(at + ttl),
		})
		require.NoError(t, err)
		return m, dup
	}
	_, dup := appendKey("m1", 0, 10*time.Second)
	require.False(t, dup)
	// Claimed again after expiry: the heap still holds the first expiry,
	// which this Append pops; it must not evict the new entry.
	_, dup = appendKey("m2", 20*time.Second, 10*time.Second)
	require.False(t, dup)
	require.Equal(t, 1, s.IdempotencyEntries())
	got, dup := appendKey("m3", 25*time.Second, 10*time.Second)
	require.True(t, dup)
	require.Equal(t, "m2", got.ID)
	// Expired entries go once a later message passes their expiry.
	_, dup = appendKey("m4", time.Hour, 0)
	require.False(t, dup)
	require.Zero(t, s.IdempotencyEntries())
}

func TestIdempotencyGraceToleratesLateMessages(t *testing.T) {
	ctx := t.Context()
	for _, c := range []struct {
		name    string
		grace   time.Duration
		wantDup bool
	}{
		{"without grace the entry is gone", 0, false},
		{"grace keeps it for a late duplicate", time.Minute, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := memory.New(&memory.Options{IdempotencyGrace: c.grace})
			_, _, err := s.Append(ctx, store.Message{Subject: "a", ID: "m1", Time: t0, IdemKey: "k", IdemExpires: t0.Add(10 * time.Second)})
			require.NoError(t, err)
			// A message stamped later arrives first and moves the clock past
			// the expiry.
			_, _, err = s.Append(ctx, store.Message{Subject: "a", ID: "m2", Time: t0.Add(11 * time.Second)})
			require.NoError(t, err)
			// A duplicate stamped before the expiry arrives late.
			_, dup, err := s.Append(ctx, store.Message{Subject: "a", ID: "m3", Time: t0.Add(9 * time.Second), IdemKey: "k", IdemExpires: t0.Add(19 * time.Second)})
			require.NoError(t, err)
			require.Equal(t, c.wantDup, dup)
		})
	}
}

func TestTrimmedMessageStillDeduplicates(t *testing.T) {
	s := memory.New(nil)
	ctx := t.Context()
	orig, _, err := s.Append(ctx, store.Message{Subject: "a", ID: "m1", Time: t0, IdemKey: "k", IdemExpires: t0.Add(time.Hour), Body: []byte("x")})
	require.NoError(t, err)
	n, err := s.TrimBefore(ctx, "a", t0.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got, dup, err := s.Append(ctx, store.Message{Subject: "a", ID: "m2", Time: t0.Add(time.Minute), IdemKey: "k", IdemExpires: t0.Add(2 * time.Hour)})
	require.NoError(t, err)
	require.True(t, dup)
	require.Equal(t, orig, got)
}

func TestIdempotencyEntriesAfterClose(t *testing.T) {
	s := memory.New(nil)
	_, _, err := s.Append(t.Context(), store.Message{Subject: "a", ID: "m1", Time: t0, IdemKey: "k", IdemExpires: t0.Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, 1, s.IdempotencyEntries())
	require.NoError(t, s.Close(t.Context()))
	require.Zero(t, s.IdempotencyEntries())
}

var body = make([]byte, 256)

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "msg-" + strconv.Itoa(i)
	}
	return out
}

// BenchmarkAppend appends 256-byte messages to one subject, without
// idempotency key.
func BenchmarkAppend(b *testing.B) {
	s := memory.New(nil)
	ctx := b.Context()
	id := ids(b.N)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := s.Append(ctx, store.Message{Subject: "orders", ID: id[i], Time: t0, Body: body}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendIdempotent appends with a unique idempotency key each, the
// clock advancing 1µs per message and keys living 1ms, so eviction runs.
func BenchmarkAppendIdempotent(b *testing.B) {
	s := memory.New(nil)
	ctx := b.Context()
	id := ids(b.N)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now := t0.Add(time.Duration(i) * time.Microsecond)
		m := store.Message{Subject: "orders", ID: id[i], Time: now, IdemKey: id[i], IdemExpires: now.Add(time.Millisecond), Body: body}
		if _, _, err := s.Append(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendParallel appends from GOMAXPROCS goroutines over 8
// subjects.
func BenchmarkAppendParallel(b *testing.B) {
	s := memory.New(nil)
	ctx := b.Context()
	id := ids(b.N)
	subjects := make([]string, 8)
	for i := range subjects {
		subjects[i] = fmt.Sprintf("subject-%d", i)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1) - 1
			m := store.Message{Subject: subjects[i%int64(len(subjects))], ID: id[i], Time: t0, Body: body}
			if _, _, err := s.Append(ctx, m); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRead reads 100 messages of 256 bytes from a log of 100,000.
func BenchmarkRead(b *testing.B) {
	const logLen, batch = 100_000, 100
	s := memory.New(nil)
	ctx := b.Context()
	for i, id := range ids(logLen) {
		if _, _, err := s.Append(ctx, store.Message{Subject: "orders", ID: id, Time: t0.Add(time.Duration(i)), Body: body}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.SetBytes(batch * int64(len(body)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		from := uint64(i*batch%(logLen-batch)) + 1
		ms, err := s.Read(ctx, "orders", from, batch)
		if err != nil || len(ms) != batch || ms[0].Seq != from {
			b.Fatalf("Read from %d: %d messages, err %v", from, len(ms), err)
		}
	}
}

// BenchmarkLookup looks messages up by id in a log of 100,000.
func BenchmarkLookup(b *testing.B) {
	const logLen = 100_000
	s := memory.New(nil)
	ctx := b.Context()
	id := ids(logLen)
	for _, x := range id {
		if _, _, err := s.Append(ctx, store.Message{Subject: "orders", ID: x, Time: t0, Body: body}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.Lookup(ctx, id[i%logLen]); err != nil {
			b.Fatal(err)
		}
	}
}
