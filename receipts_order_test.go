package pigeon_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"pigeon/transport/transporttest"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestReceiptFinderTwoPasses: a delivery record may precede the
// acceptance of the message it lists (a subscriber reading the store is
// handed a message in the moment between its append and the queueing of
// its acceptance record). Two passes find it; a single pass of Next finds
// only what follows the acceptance.
func TestReceiptFinderTwoPasses(t *testing.T) {
	accepted := func(seq uint64, subject, id, seqs string) pigeon.AuditRecord {
		return pigeon.AuditRecord{Seq: seq, Type: string(pigeon.EventPublishAccepted), Subject: subject, MessageID: id, Seqs: seqs}
	}
	batch := func(seq uint64, ev pigeon.Event, subject, seqs string, count int, id string) pigeon.AuditRecord {
		return pigeon.AuditRecord{Seq: seq, Type: string(ev), Subject: subject, Seqs: seqs, Count: count, MessageID: id, Principal: "bob"}
	}
	one := func(seq uint64, ev pigeon.Event, subject, id string) pigeon.AuditRecord {
		return pigeon.AuditRecord{Seq: seq, Type: string(ev), Subject: subject, MessageID: id, Principal: "bob"}
	}
	type got = receiptGot
	for _, tc := range []struct {
		name          string
		log           []pigeon.AuditRecord
		single, twice []got
	}{
		{
			name: "in order",
			log: []pigeon.AuditRecord{
				accepted(1, "chat", "X", "7"),
				batch(2, pigeon.EventDeliveryDispatched, "chat", "5-9", 5, ""),
				batch(3, pigeon.EventDeliveryAcked, "chat", "7", 1, "X"),
			},
			single: []got{{pigeon.EventDeliveryDispatched, 2, 7}, {pigeon.EventDeliveryAcked, 3, 7}},
			twice:  []got{{pigeon.EventDeliveryDispatched, 2, 7}, {pigeon.EventDeliveryAcked, 3, 7}},
		},
		{
			name: "dispatched before its acceptance",
			log: []pigeon.AuditRecord{
				batch(1, pigeon.EventDeliveryDispatched, "chat", "5-9", 5, ""),
				one(2, pigeon.EventDeliveryNacked, "chat", "X"),
				accepted(3, "chat", "X", "7"),
				batch(4, pigeon.EventDeliveryAcked, "chat", "6-8", 3, ""),
			},
			single: []got{{pigeon.EventDeliveryNacked, 2, 0}, {pigeon.EventDeliveryAcked, 4, 7}},
			twice:  []got{{pigeon.EventDeliveryDispatched, 1, 7}, {pigeon.EventDeliveryNacked, 2, 7}, {pigeon.EventDeliveryAcked, 4, 7}},
		},
		{
			name: "an id reused after its message was trimmed",
			log: []pigeon.AuditRecord{
				accepted(1, "chat", "X", "1"),
				batch(2, pigeon.EventDeliveryDispatched, "chat", "1", 1, "X"),
				batch(3, pigeon.EventDeliveryDispatched, "chat", "2-3", 2, ""), // before the second acceptance
				one(4, pigeon.EventDeliveryNacked, "chat", "X"),                // of the first: in force
				accepted(5, "chat", "X", "3"),
				one(6, pigeon.EventDeliveryNacked, "chat", "X"),
				batch(7, pigeon.EventDeliveryDispatched, "other", "3", 1, ""), // another subject's 3
			},
			single: []got{{pigeon.EventDeliveryDispatched, 2, 1}, {pigeon.EventDeliveryNacked, 4, 1}, {pigeon.EventDeliveryNacked, 6, 3}},
			twice:  []got{{pigeon.EventDeliveryDispatched, 2, 1}, {pigeon.EventDeliveryDispatched, 3, 3}, {pigeon.EventDeliveryNacked, 4, 1}, {pigeon.EventDeliveryNacked, 6, 3}},
		},
		{
			name: "acceptance trimmed from the log",
			log: []pigeon.AuditRecord{
				batch(10, pigeon.EventDeliveryDispatched, "chat", "4", 1, "X"),
				one(11, pigeon.EventDeliveryAcked, "chat", "X"),
				batch(12, pigeon.EventDeliveryDispatched, "chat", "4-6", 3, ""),
			},
			single: []got{{pigeon.EventDeliveryDispatched, 10, 4}, {pigeon.EventDeliveryAcked, 11, 0}},
			twice:  []got{{pigeon.EventDeliveryDispatched, 10, 4}, {pigeon.EventDeliveryAcked, 11, 0}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			single, twice := findReceipts(t, "X", tc.log)
			require.Equal(t, tc.single, single, "one pass")
			require.Equal(t, tc.twice, twice, "two passes")
		})
	}
}

// TestReceiptsUnderConcurrentPublishes: subscribers reading the store
// while several publishers append are handed messages whose acceptance
// records may come later in the chain; every delivery of every message is
// still among its receipts.
func TestReceiptsUnderConcurrentPublishes(t *testing.T) {
	e := chatEngine(t)
	const pubs, each, subs = 4, 300, 4
	ids := make([][]string, pubs)
	var published sync.WaitGroup
	for p := range pubs {
		s := chatSession(t, e, "alice-token", "chat.messages")
		published.Go(func() {
			for i := range each {
				res, err := s.Publish(ctx, chat(i))
				if err != nil {
					t.Error(err)
					return
				}
				ids[p] = append(ids[p], res.Message.ID)
			}
		})
	}
	var handled sync.WaitGroup
	handled.Add(pubs * each * subs)
	var ss []pigeon.Subscription
	for range subs {
		sess := chatSession(t, e, "bob-token", "chat.messages")
		s, err := sess.Subscribe(ctx, "chat.messages", func(context.Context, *pigeon.Delivery) error {
			handled.Done()
			return nil
		}, pigeon.WithStart(pigeon.StartFirst), pigeon.WithMaxInFlight(8))
		require.NoError(t, err)
		ss = append(ss, s)
	}
	published.Wait()
	done := make(chan struct{})
	go func() { handled.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("not every message was delivered to every subscriber")
	}
	for _, s := range ss {
		require.NoError(t, s.Unsubscribe(ctx)) // records what was acknowledged
	}
	// Engine.Receipts reads the log twice for one id; the finder is run
	// here over one read of it for all of them, and Receipts checked
	// against it for some.
	log, err := e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	for p, l := range ids {
		for i, id := range l {
			f := pigeon.NewReceiptFinder(id)
			for _, pass := range []func(*pigeon.AuditRecord){f.Accepted, f.Next} {
				for j := range log {
					pass(&log[j])
				}
			}
			if i%100 == p {
				rs, err := e.Receipts(ctx, id)
				require.NoError(t, err)
				require.Equal(t, f.Receipts, rs)
			}
			count := map[pigeon.Event]int{}
			for _, r := range f.Receipts {
				require.NotZero(t, r.Seq)
				count[r.Event]++
			}
			require.Equal(t, map[pigeon.Event]int{pigeon.EventDeliveryDispatched: subs, pigeon.EventDeliveryAcked: subs}, count, "receipts of %s", id)
		}
	}
}

// BenchmarkReceipts: the receipts of one message in a log of 5,000
// publishes delivered and acknowledged in batches, which Receipts reads
// twice (ReceiptFinder); records/op is the log's length.
func BenchmarkReceipts(b *testing.B) {
	e, err := pigeon.New(context.Background(), transporttest.Options())
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, e.Shutdown(context.Background())) })
	pub, err := e.Connect(ctx, "alice-token", []string{"chat.messages"})
	require.NoError(b, err)
	const n = 5000
	var id string
	for i := range n {
		res, err := pub.Publish(ctx, chat(i))
		require.NoError(b, err)
		if i == n/2 {
			id = res.Message.ID
		}
	}
	sub, err := e.Connect(ctx, "bob-token", []string{"chat.messages"})
	require.NoError(b, err)
	var handled sync.WaitGroup
	handled.Add(n)
	s, err := sub.Subscribe(ctx, "chat.messages", func(context.Context, *pigeon.Delivery) error {
		handled.Done()
		return nil
	}, pigeon.WithStart(pigeon.StartFirst))
	require.NoError(b, err)
	handled.Wait()
	require.NoError(b, s.Unsubscribe(ctx))
	rs, err := e.Receipts(ctx, id)
	require.NoError(b, err)
	require.Len(b, rs, 2)
	log, err := e.Audit(ctx, 0, 0)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Receipts(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(log)), "records/op")
}

// receiptGot is what a receipt test looks at in a receipt: its event, the
// audit record it came from, the sequence of the message received.
type receiptGot struct {
	ev       pigeon.Event
	auditSeq uint64
	seq      uint64
}

// findReceipts reads log for the receipts of message id in one pass of
// Next and in two passes (Accepted, then Next), as Engine.Receipts does,
// each receipt bob's.
func findReceipts(t *testing.T, id string, log []pigeon.AuditRecord) (single, twice []receiptGot) {
	t.Helper()
	of := func(f *pigeon.ReceiptFinder) []receiptGot {
		var out []receiptGot
		for _, r := range f.Receipts {
			require.Equal(t, "bob", r.Principal)
			out = append(out, receiptGot{r.Event, r.AuditSeq, r.Seq})
		}
		return out
	}
	one := pigeon.NewReceiptFinder(id)
	for i := range log {
		one.Next(&log[i])
	}
	two := pigeon.NewReceiptFinder(id)
	for _, pass := range []func(*pigeon.AuditRecord){two.Accepted, two.Next} {
		for i := range log {
			pass(&log[i])
		}
	}
	return of(one), of(two)
}
