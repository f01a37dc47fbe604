package pigeon_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/wal"
	"pigeon/transport/transporttest"
)

// receipt is what these tests compare of a pigeon.Receipt.
type receipt struct {
	Event     pigeon.Event
	Principal string
	Seq       uint64
	Time      time.Time
}

func receiptsOf(rs []pigeon.Receipt, withTime bool) []receipt {
	out := make([]receipt, 0, len(rs))
	for _, r := range rs {
		g := receipt{Event: r.Event, Principal: r.Principal, Seq: r.Seq}
		if withTime {
			g.Time = r.Time.UTC()
		}
		out = append(out, g)
	}
	return out
}

// TestReceiptsNameTheMessageAnAnswerWasOf: a message id names one message
// at a time only. Bob receives and acks the message published as
// order-42 (sequence 1); retention trims it and a newer message takes the
// id (sequence 3), which bob receives and acks at once. Each receipt of
// order-42 names the message it was of: its sequence, bob, and the time
// of the delivery or the ack. An ack record naming the id alone, recorded
// before the acceptance of the newer message (as on the write-ahead log
// before its acceptances were chained ahead of the broker's records), was
// taken for the acceptance then in force, the trimmed message's. The chain, with
// records of one message in the form from before they named their
// sequence, still verifies: through the engine, through the store, and as
// `pigeon audit verify` and `pigeon audit receipts` read it offline.
func TestReceiptsNameTheMessageAnAnswerWasOf(t *testing.T) {
	for _, durable := range []bool{false, true} {
		name := "memory"
		if durable {
			name = "wal"
		}
		t.Run(name, func(t *testing.T) {
			var (
				ws       *wal.Store
				dir      = filepath.Join(t.TempDir(), "data")
				once     sync.Once
				closeWAL = func() { once.Do(func() { require.NoError(t, ws.Close(ctx)) }) }
			)
			mutate := []func(*pigeon.Options){oneMessageTasks}
			if durable {
				var err error
				ws, err = wal.Open(dir, nil)
				require.NoError(t, err)
				// Records of one message as a broker wrote them before
				// they named the sequence: they verify and read as before.
				old := pigeon.AuditRecord{Type: string(pigeon.EventDeliveryAcked), Outcome: string(pigeon.OutcomeAllow), Subject: "tasks.run", Principal: transporttest.Bob, MessageID: "legacy-1", Time: time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)}
				nacked := old
				nacked.Type, nacked.Outcome = string(pigeon.EventDeliveryNacked), string(pigeon.OutcomeDeny)
				require.NoError(t, ws.ChainAudit(ctx, []store.AuditRecord{old, nacked}))
				t.Cleanup(closeWAL)
				mutate = append(mutate, func(o *pigeon.Options) { o.Store = ws })
			}
			f, _ := retentionFixture(t, 0, mutate...)
			boss, bob := f.connect("boss-token", "tasks.run"), f.connect("bob-token", "tasks.run")
			publish := func(n int, id string) uint64 { return publishTask(t, boss, n, id) }
			step := func() time.Time { f.clock.Advance(100 * time.Millisecond); return f.clock.Now().UTC() }

			require.Equal(t, uint64(1), publish(1, "order-42"))
			t1 := step()
			got, err := bob.Receive(ctx, "tasks.run", 1)
			require.NoError(t, err)
			require.Len(t, got, 1)
			t2 := step()
			require.NoError(t, bob.Ack(ctx, "tasks.run", "order-42"))
			require.Equal(t, uint64(2), publish(2, "other"))
			f.e.EnforceRetention(ctx)
			require.Equal(t, uint64(3), publish(3, "order-42"), "the id is free again")
			t3 := step()
			got, err = bob.Receive(ctx, "tasks.run", 5)
			require.NoError(t, err)
			require.Len(t, got, 2)
			require.Equal(t, uint64(3), got[1].Sequence)
			t4 := step()
			require.NoError(t, bob.Ack(ctx, "tasks.run", "order-42"))

			want := []receipt{
				{pigeon.EventDeliveryDispatched, transporttest.Bob, 1, t1},
				{pigeon.EventDeliveryAcked, transporttest.Bob, 1, t2},
				{pigeon.EventDeliveryDispatched, transporttest.Bob, 3, t3},
				{pigeon.EventDeliveryAcked, transporttest.Bob, 3, t4},
			}
			rs, err := f.e.Receipts(ctx, "order-42")
			require.NoError(t, err)
			require.Equal(t, want, receiptsOf(rs, true), "each receipt names the message received")

			_, err = f.e.VerifyAudit(ctx)
			require.NoError(t, err, "Engine.VerifyAudit")
			if !durable {
				return
			}
			legacy, err := f.e.Receipts(ctx, "legacy-1")
			require.NoError(t, err)
			require.Equal(t, []receipt{{pigeon.EventDeliveryAcked, transporttest.Bob, 0, time.Time{}}, {pigeon.EventDeliveryNacked, transporttest.Bob, 0, time.Time{}}}, receiptsOf(legacy, false),
				"a record naming the id alone, its acceptance not in the log, names no sequence")
			_, err = store.VerifyAudit(ctx, ws)
			require.NoError(t, err, "store.VerifyAudit")

			// Offline, as `pigeon audit verify --data` and `pigeon audit
			// receipts --data` read the log.
			require.NoError(t, f.e.Shutdown(ctx))
			closeWAL()
			n := 0
			require.NoError(t, wal.ScanAudit(dir, func(*pigeon.AuditRecord) error { n++; return nil }), "the chain verifies offline")
			require.Positive(t, n)
			finder := pigeon.NewReceiptFinder("order-42")
			for _, pass := range []func(*pigeon.AuditRecord){finder.Accepted, finder.Next} {
				require.NoError(t, wal.ScanAudit(dir, func(r *pigeon.AuditRecord) error { pass(r); return nil }))
			}
			require.Equal(t, want, receiptsOf(finder.Receipts, true), "offline receipts")
		})
	}
}

// TestReceiptOfALateFailureNamesTheMessageItWasOf: a push subscriber's
// handler fails a message after retention trimmed it and a newer message
// took its id. The delivery.nacked record follows the newer message's
// acceptance in the log, and was taken for the newer message's: the
// auditor was told bob refused a message he had not yet been handed.
func TestReceiptOfALateFailureNamesTheMessageItWasOf(t *testing.T) {
	f, _ := retentionFixture(t, 0, oneMessageTasks)
	boss, bob := f.connect("boss-token", "tasks.run"), f.connect("bob-token", "tasks.run")
	holding, release, handledNewer := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var held, newer sync.Once
	sub, err := bob.Subscribe(ctx, "tasks.run", func(_ context.Context, d *pigeon.Delivery) error {
		switch {
		case d.Message.ID == "order-9" && d.Message.Sequence == 1:
			held.Do(func() { close(holding) })
			<-release
			return errors.New("the handler failed")
		case d.Message.ID == "order-9":
			newer.Do(func() { close(handledNewer) })
		}
		return nil
	}, pigeon.WithMaxInFlight(1))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe(ctx) })
	publish := func(n int, id string) uint64 { return publishTask(t, boss, n, id) }

	require.Equal(t, uint64(1), publish(1, "order-9"))
	awaitClosed(t, holding, "the first order-9 reaches the handler")
	require.Equal(t, uint64(2), publish(2, "other"))
	f.e.EnforceRetention(ctx)
	require.Equal(t, uint64(3), publish(3, "order-9"), "the id is free again")
	f.clock.Advance(100 * time.Millisecond)
	failedAt := f.clock.Now().UTC()
	close(release)
	awaitClosed(t, handledNewer, "the newer order-9 reaches the handler")

	var rs []pigeon.Receipt
	require.Eventually(t, func() bool {
		rs, err = f.e.Receipts(ctx, "order-9")
		require.NoError(t, err)
		for _, r := range rs {
			if r.Event == pigeon.EventDeliveryAcked {
				return true
			}
		}
		return false
	}, 30*time.Second, time.Millisecond, "the newer message's ack is recorded")
	require.Equal(t, []receipt{
		{pigeon.EventDeliveryDispatched, transporttest.Bob, 1, time.Time{}},
		{pigeon.EventDeliveryNacked, transporttest.Bob, 1, time.Time{}},
		{pigeon.EventDeliveryDispatched, transporttest.Bob, 3, time.Time{}},
		{pigeon.EventDeliveryAcked, transporttest.Bob, 3, time.Time{}},
	}, receiptsOf(rs, false))
	require.Equal(t, failedAt, rs[1].Time.UTC(), "the failure's time")
	_, err = f.e.VerifyAudit(ctx)
	require.NoError(t, err)
}

// awaitClosed waits up to 30 s for ch to be closed.
func awaitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("timed out waiting: " + what)
	}
}

// TestLateAnswerRefusalNamesTheSequenceGiven: a late ack or nack naming a
// sequence whose message is gone (its id taken by a newer message) is
// refused, and the ack.denied or nack.denied record names the message the
// caller answered: the id and the sequence it gave, not the newer
// message's. A refused ack of a message not leased to the caller names
// the message holding the id, by its sequence.
func TestLateAnswerRefusalNamesTheSequenceGiven(t *testing.T) {
	f, _ := retentionFixture(t, 0, oneMessageTasks)
	boss, bob, alice := f.connect("boss-token", "tasks.run"), f.connect("bob-token", "tasks.run"), f.connect("alice-token", "tasks.run")
	publish := func(n int, id string) uint64 { return publishTask(t, boss, n, id) }
	require.Equal(t, uint64(1), publish(1, "order-5"))
	got, err := bob.Receive(ctx, "tasks.run", 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, uint64(2), publish(2, "other"))
	f.e.EnforceRetention(ctx)
	require.Equal(t, uint64(3), publish(3, "order-5"))
	got, err = bob.Receive(ctx, "tasks.run", 5)
	require.NoError(t, err)
	require.Len(t, got, 2)

	settler := bob.(pigeon.SequenceSettler)
	requireCode(t, settler.AckSequence(ctx, "tasks.run", "order-5", 1), pigeon.CodeAckNotAllowed)
	requireCode(t, settler.NackSequence(ctx, "tasks.run", "order-5", 1, 0), pigeon.CodeAckNotAllowed)
	requireCode(t, alice.Ack(ctx, "tasks.run", "order-5"), pigeon.CodeAckNotAllowed)

	recs, err := f.e.Audit(ctx, 1, 10000)
	require.NoError(t, err)
	type denied struct {
		Type, Principal, MessageID, Seqs string
		Count                            int
	}
	var refusals []denied
	for _, r := range recs {
		if r.Type == string(pigeon.EventAckDenied) || r.Type == string(pigeon.EventNackDenied) {
			refusals = append(refusals, denied{r.Type, r.Principal, r.MessageID, r.Seqs, r.Count})
		}
	}
	require.Equal(t, []denied{
		{string(pigeon.EventAckDenied), transporttest.Bob, "order-5", "1", 0},
		{string(pigeon.EventNackDenied), transporttest.Bob, "order-5", "1", 0},
		{string(pigeon.EventAckDenied), transporttest.Alice, "order-5", "3", 0},
	}, refusals)
	_, err = f.e.VerifyAudit(ctx)
	require.NoError(t, err)
}

// TestReceiptFinderReadsTheSequenceOfOneMessage: a record of one message
// (an ack by id, a nack, an exhaustion) names its sequence, and is that
// message's wherever the acceptances of its id stand in the log: an ack
// recorded before the acceptance of the message it acks, a failure
// recorded after a newer message took the id, a record whose acceptance
// audit retention removed. A record naming the id alone (written before
// they named the sequence) is still the acceptance in force's.
func TestReceiptFinderReadsTheSequenceOfOneMessage(t *testing.T) {
	accepted := func(seq uint64, id, seqs string) pigeon.AuditRecord {
		return pigeon.AuditRecord{Seq: seq, Type: string(pigeon.EventPublishAccepted), Subject: "tasks", MessageID: id, Seqs: seqs}
	}
	batch := func(seq uint64, ev pigeon.Event, seqs string, count int, id string) pigeon.AuditRecord {
		return pigeon.AuditRecord{Seq: seq, Type: string(ev), Subject: "tasks", Seqs: seqs, Count: count, MessageID: id, Principal: "bob"}
	}
	one := func(seq uint64, ev pigeon.Event, id, seqs string) pigeon.AuditRecord {
		return pigeon.AuditRecord{Seq: seq, Type: string(ev), Subject: "tasks", MessageID: id, Seqs: seqs, Principal: "bob"}
	}
	type got = receiptGot
	for _, tc := range []struct {
		name          string
		log           []pigeon.AuditRecord
		single, twice []got
	}{
		{
			name: "answers around a reuse of the id",
			log: []pigeon.AuditRecord{
				accepted(1, "X", "1"),
				batch(2, pigeon.EventDeliveryDispatched, "1", 1, "X"),
				one(3, pigeon.EventDeliveryAcked, "X", "1"),
				batch(4, pigeon.EventDeliveryDispatched, "2-3", 2, ""),
				one(5, pigeon.EventDeliveryAcked, "X", "3"), // before its acceptance
				accepted(6, "X", "3"),
				one(7, pigeon.EventDeliveryNacked, "X", "1"),    // of the first, after the reuse
				one(8, pigeon.EventDeliveryExhausted, "X", "1"), // likewise
				one(9, pigeon.EventDeliveryNacked, "X", ""),     // the id alone: the acceptance in force
			},
			single: []got{{pigeon.EventDeliveryDispatched, 2, 1}, {pigeon.EventDeliveryAcked, 3, 1}, {pigeon.EventDeliveryAcked, 5, 3}, {pigeon.EventDeliveryNacked, 7, 1}, {pigeon.EventDeliveryExhausted, 8, 1}, {pigeon.EventDeliveryNacked, 9, 3}},
			twice:  []got{{pigeon.EventDeliveryDispatched, 2, 1}, {pigeon.EventDeliveryAcked, 3, 1}, {pigeon.EventDeliveryDispatched, 4, 3}, {pigeon.EventDeliveryAcked, 5, 3}, {pigeon.EventDeliveryNacked, 7, 1}, {pigeon.EventDeliveryExhausted, 8, 1}, {pigeon.EventDeliveryNacked, 9, 3}},
		},
		{
			name: "acceptance trimmed from the log",
			log: []pigeon.AuditRecord{
				one(10, pigeon.EventDeliveryAcked, "X", "4"),
				one(11, pigeon.EventDeliveryNacked, "X", ""),
			},
			single: []got{{pigeon.EventDeliveryAcked, 10, 4}, {pigeon.EventDeliveryNacked, 11, 0}},
			twice:  []got{{pigeon.EventDeliveryAcked, 10, 4}, {pigeon.EventDeliveryNacked, 11, 0}},
		},
		{
			name: "another id's record",
			log: []pigeon.AuditRecord{
				accepted(1, "X", "1"),
				one(2, pigeon.EventDeliveryAcked, "Y", "1"),
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			single, twice := findReceipts(t, "X", tc.log)
			require.Equal(t, tc.single, single, "one pass")
			require.Equal(t, tc.twice, twice, "two passes")
		})
	}
}
