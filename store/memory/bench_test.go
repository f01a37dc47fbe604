package memory_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"pigeon/store"
	"pigeon/store/memory"
)

// BenchmarkAppend appends to a store that already holds held messages, the
// way the broker publishes: a 256-byte body, a new 24-byte id and, with
// key=true, a new scoped idempotency key each time, living a day (the
// broker's default) so that no entry expires and the store only grows. The
// ids and keys are made in batches with the timer stopped, so allocs/op is
// the store's own.
func BenchmarkAppend(b *testing.B) {
	for _, held := range []int{10_000, 1_000_000} {
		for _, keyed := range []bool{false, true} {
			b.Run(fmt.Sprintf("held=%dk/key=%v", held/1000, keyed), func(b *testing.B) {
				s := memory.New(nil)
				ctx := b.Context()
				f := feed{keyed: keyed}
				for range held {
					if _, _, err := s.Append(ctx, f.next(nil)); err != nil {
						b.Fatal(err)
					}
				}
				runtime.GC() // the filling's garbage is not the loop's
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					if _, dup, err := s.Append(ctx, f.next(b)); err != nil || dup {
						b.Fatalf("dup %v, err %v", dup, err)
					}
				}
			})
		}
	}
}

// BenchmarkAppendAccepted is what the broker asks of the memory store for
// each message it accepts: AppendAcceptedTo with a broker-sized envelope
// (700 bytes), a new id and a new idempotency key scoped as the broker
// scopes it, living a day, its acceptance record queued, and that record
// appended to the audit log with the next Seq, its id "aud_" and the Seq
// and its hash chained, as the broker's audit writer does. The store
// already holds held messages. The ids, keys and hashes are made in
// batches with the timer stopped, so allocs/op is the store's own.
// heap-B/msg is the heap in use after the loop per message held: what the
// store keeps for one.
func BenchmarkAppendAccepted(b *testing.B) {
	const held = 100_000
	s := memory.New(nil)
	f := acceptedFeed{msgs: feed{keyed: true, scope: brokerScope}}
	for range held {
		f.publish(nil, s)
	}
	runtime.GC() // the filling's garbage is not the loop's
	b.ReportAllocs()
	b.SetBytes(int64(len(envelope)))
	for b.Loop() {
		f.publish(b, s)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapAlloc)/float64(held+b.N), "heap-B/msg")
	runtime.KeepAlive(s)
}

// envelope is a stored envelope of the broker's size, and brokerScope the
// scope the broker gives a key: subject and principal.
var (
	envelope    = make([]byte, 700)
	brokerScope = "payments.authorize\x00spiffe://merchant-prod/ns/checkout/sa/checkout-api\x00"
)

// acceptedFeed makes the messages and audit records of
// BenchmarkAppendAccepted, and queues the acceptance records.
type acceptedFeed struct {
	msgs        feed
	ids, hashes []string
	n           int // records made
	prev        string
	queued      []store.AuditRecord
}

func (f *acceptedFeed) QueueAudit(r store.AuditRecord) { f.queued = append(f.queued, r) }

// publish appends the next message as the broker does, and its record.
func (f *acceptedFeed) publish(b *testing.B, s *memory.Store) {
	ctx := context.Background()
	m := f.msgs.next(b)
	m.Body = envelope
	acc := store.AuditRecord{
		Type: "publish.accepted", Time: m.Time, Outcome: "allow", Principal: "spiffe://merchant-prod/ns/checkout/sa/checkout-api",
		ContractID: "ctr_36891fc59f53ec1ac16e27ffb5bab7d5d0bb", PolicyID: "payments.authorize@v1", SchemaID: "payment.authorization.v1",
	}
	if _, dup, err := s.AppendAcceptedTo(ctx, m, acc, f); err != nil || dup {
		panic(fmt.Sprint("dup ", dup, ", err ", err))
	}
	i := batchSlot(b, f.n, f.refill)
	f.n++
	r := f.queued[0]
	f.queued = f.queued[:0]
	r.Seq, r.ID, r.PrevHash, r.Hash = uint64(f.n), f.ids[i], f.prev, f.hashes[i]
	f.prev = r.Hash
	if err := s.AppendAudit(ctx, r); err != nil {
		panic(err)
	}
}

func (f *acceptedFeed) refill() {
	if f.hashes == nil {
		f.ids, f.hashes = make([]string, feedBatch), make([]string, feedBatch)
		f.prev = store.Genesis
	}
	for i := range f.hashes {
		f.ids[i] = "aud_" + strconv.Itoa(f.n+i+1)
		f.hashes[i] = fmt.Sprintf("%064x", f.n+i)
	}
}

// feed makes the messages of BenchmarkAppend.
type feed struct {
	keyed bool
	// scope starts every key (default "payments.authorize\x00svc-checkout\x00").
	scope     string
	n         int // messages made
	ids, keys []string
}

const feedBatch = 4096

// batchSlot returns where the n-th item made falls in its batch, calling
// refill first, with b's timer stopped unless b is nil, when a new batch
// starts.
func batchSlot(b *testing.B, n int, refill func()) int {
	i := n % feedBatch
	if i == 0 {
		if b != nil {
			b.StopTimer()
			defer b.StartTimer()
		}
		refill()
	}
	return i
}

// next returns the next message. It makes the strings of the next batch
// when the last is used up, with b's timer stopped unless b is nil.
func (f *feed) next(b *testing.B) store.Message {
	i := batchSlot(b, f.n, f.refill)
	now := t0.Add(time.Duration(f.n) * time.Microsecond)
	f.n++
	m := store.Message{Subject: "payments.authorize", ID: f.ids[i], Time: now, Body: body}
	if f.keyed {
		m.IdemKey, m.IdemExpires = f.keys[i], now.Add(24*time.Hour)
	}
	return m
}

func (f *feed) refill() {
	if f.ids == nil {
		f.ids, f.keys = make([]string, feedBatch), make([]string, feedBatch)
	}
	for i := range f.ids {
		n := strconv.Itoa(f.n + i)
		f.ids[i] = fmt.Sprintf("msg_%020s", n)
		if f.keyed {
			scope := f.scope
			if scope == "" {
				scope = "payments.authorize\x00svc-checkout\x00"
			}
			f.keys[i] = scope + "k-" + n
		}
	}
}

var body = make([]byte, 256)

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "msg-" + strconv.Itoa(i)
	}
	return out
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

// BenchmarkAppendAudit appends one audit record at a time to a store that
// already holds a million, the way the broker chains them: Seq from 1, ID
// "aud_" and the Seq, PrevHash the previous Hash, the low-cardinality fields
// mostly as in the previous record, a new message id each. The records are
// made and hashed in batches with the timer stopped, so allocs/op is the
// store's own. heap-B/held is the heap in use per held record before the
// loop, gc-µs how long a full collection takes then.
func BenchmarkAppendAudit(b *testing.B) {
	const held = 1_000_000
	s := memory.New(nil)
	ctx := b.Context()
	var f auditFeed
	for range held {
		if err := s.AppendAudit(ctx, f.next(nil)...); err != nil {
			b.Fatal(err)
		}
	}
	// What the held records cost: heap bytes each, and the time of a full
	// collection, which marks whatever they hold pointers to.
	runtime.GC() // the filling's garbage is not the loop's
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap := ms.HeapAlloc
	start := time.Now()
	runtime.GC()
	gc := time.Since(start)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.AppendAudit(ctx, f.next(b)...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(heap)/held, "heap-B/held")
	b.ReportMetric(float64(gc.Microseconds()), "gc-µs")
}

// auditFeed makes the records of BenchmarkAppendAudit.
type auditFeed struct {
	n    int // records made
	prev string
	recs []store.AuditRecord
}

// next returns the next record, as a one-record batch. It makes the next
// batch when the last is used up, with b's timer stopped unless b is nil.
func (f *auditFeed) next(b *testing.B) []store.AuditRecord {
	i := batchSlot(b, f.n, f.refill)
	f.n++
	return f.recs[i : i+1]
}

func (f *auditFeed) refill() {
	if f.recs == nil {
		f.recs = make([]store.AuditRecord, feedBatch)
		f.prev = store.Genesis
	}
	for i := range f.recs {
		seq := uint64(f.n + i + 1)
		r := store.AuditRecord{
			Seq: seq, ID: "aud_" + strconv.FormatUint(seq, 10),
			Type: "publish.accepted", Time: t0.Add(time.Duration(seq) * time.Microsecond),
			Outcome: "allow", Subject: "payments.authorize", Principal: "svc-checkout",
			ContractID: "ctr_7k2m9x4q1w8e5r3t6y0u", PolicyID: "payments-v3", SchemaID: "payment.authorization.v1",
			MessageID: fmt.Sprintf("msg_%020d", seq), PrevHash: f.prev,
		}
		if seq%16 == 0 {
			r.Type, r.Outcome, r.Code, r.Gate = "publish.denied", "deny", "SCHEMA_INVALID", "schema"
		}
		r.Hash = r.ComputeHash()
		f.prev = r.Hash
		f.recs[i] = r
	}
}
