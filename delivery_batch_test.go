package pigeon_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/transport/transporttest"
)

// chatEngine is an engine with the transport suite's catalog (chat.messages
// is pubsub, jobs.run a work queue).
func chatEngine(t *testing.T) *pigeon.Engine {
	t.Helper()
	opts := transporttest.Options()
	opts.RetryBase = time.Millisecond
	e, err := pigeon.New(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	return e
}

func chatSession(t *testing.T, e *pigeon.Engine, token, subject string) pigeon.Session {
	t.Helper()
	s, err := e.Connect(ctx, token, []string{subject})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func chat(i int) *pigeon.Message {
	return &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: []byte(`{"kind":"chat","room":"lobby","n":` + strconv.Itoa(i) + `}`)}
}

// seqsOf lists the sequences a batch record names.
func seqsOf(t *testing.T, r pigeon.AuditRecord) []uint64 {
	t.Helper()
	var out []uint64
	for part := range splitComma(r.Seqs) {
		lo, hi := part, part
		for i := range len(part) {
			if part[i] == '-' {
				lo, hi = part[:i], part[i+1:]
			}
		}
		a, err := strconv.ParseUint(lo, 10, 64)
		require.NoError(t, err)
		b, err := strconv.ParseUint(hi, 10, 64)
		require.NoError(t, err)
		for v := a; v <= b; v++ {
			out = append(out, v)
		}
	}
	return out
}

func splitComma(s string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for s != "" {
			i := 0
			for i < len(s) && s[i] != ',' {
				i++
			}
			if !yield(s[:i]) {
				return
			}
			if i == len(s) {
				return
			}
			s = s[i+1:]
		}
	}
}

// TestDeliveryRecordsCoverEveryMessage: a subscription's deliveries are
// recorded in batch records, fewer than one per message, that name every
// message delivered exactly once, with a count and a digest an auditor can
// recompute from the stored ids; and the receipts of any one message name
// its receiver.
func TestDeliveryRecordsCoverEveryMessage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []pigeon.SubscribeOption
		events []pigeon.Event
	}{
		{"acknowledged", nil, []pigeon.Event{pigeon.EventDeliveryDispatched, pigeon.EventDeliveryAcked}},
		{"in flight 8", []pigeon.SubscribeOption{pigeon.WithMaxInFlight(8)}, []pigeon.Event{pigeon.EventDeliveryDispatched, pigeon.EventDeliveryAcked}},
		{"at most once", []pigeon.SubscribeOption{pigeon.WithAtMostOnce()}, []pigeon.Event{pigeon.EventDeliveryDispatched}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := chatEngine(t)
			pub := chatSession(t, e, "alice-token", "chat.messages")
			const n = 600
			ids := make(map[uint64]string, n)
			for i := range n {
				res, err := pub.Publish(ctx, chat(i))
				require.NoError(t, err)
				ids[res.Message.Sequence] = res.Message.ID
			}
			sub := chatSession(t, e, "bob-token", "chat.messages")
			var mu sync.Mutex
			var got []uint64
			all := make(chan struct{})
			s, err := sub.Subscribe(ctx, "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, d.Message.Sequence)
				if len(got) == n {
					close(all)
				}
				return nil
			}, append([]pigeon.SubscribeOption{pigeon.WithStart(pigeon.StartFirst)}, tc.opts...)...)
			require.NoError(t, err)
			<-all
			require.NoError(t, s.Unsubscribe(ctx)) // records what was acked

			recs, err := e.Audit(ctx, 0, 0)
			require.NoError(t, err)
			require.NoError(t, verifyRecords(recs))
			at := map[pigeon.Event]map[uint64]uint64{} // event → message sequence → audit sequence of its record
			for _, ev := range tc.events {
				at[ev] = map[uint64]uint64{}
				var covered []uint64
				records := 0
				for _, r := range recs {
					if r.Type != string(ev) || r.Ref != s.ID() {
						continue
					}
					records++
					require.Equal(t, transporttest.Bob, r.Principal)
					require.Equal(t, sub.Contract().ID(), r.ContractID)
					seqs := seqsOf(t, r)
					require.Len(t, seqs, r.Count, "count names the sequences listed")
					names := make([]string, len(seqs))
					for i, q := range seqs {
						names[i] = ids[q]
					}
					require.Equal(t, pigeon.DeliveryDigest(names), r.Digest, "digest binds the sequences to the ids")
					covered = append(covered, seqs...)
					for _, q := range seqs {
						at[ev][q] = r.Seq
					}
				}
				slices.Sort(covered)
				want := make([]uint64, 0, n)
				for q := range ids {
					want = append(want, q)
				}
				slices.Sort(want)
				require.Equal(t, want, covered, "%s records name every message once", ev)
				require.Less(t, records, n/2, "%s is recorded per batch, not per message", ev)
			}
			// The log tells each message's story in order: handed over
			// before acknowledged.
			if acked := at[pigeon.EventDeliveryAcked]; acked != nil {
				for q, dispatched := range at[pigeon.EventDeliveryDispatched] {
					require.Less(t, dispatched, acked[q], "message %d: its dispatch is recorded before its acknowledgement", q)
				}
			}
			if len(tc.opts) == 0 || tc.name == "at most once" {
				mu.Lock()
				require.True(t, slices.IsSorted(got), "one in flight: delivered in sequence order")
				mu.Unlock()
			}

			// Who received message X, and when.
			var x uint64 = 417
			rs, err := e.Receipts(ctx, ids[x])
			require.NoError(t, err)
			require.Len(t, rs, len(tc.events))
			for i, r := range rs {
				require.Equal(t, tc.events[i], r.Event)
				require.Equal(t, transporttest.Bob, r.Principal)
				require.Equal(t, s.ID(), r.Ref)
				require.False(t, r.Time.IsZero())
			}
		})
	}
}

// TestRevocationStopsTheNextDelivery: messages already queued for a
// subscriber are not handed over once its contract is revoked, not even
// the rest of the batch they arrived in.
func TestRevocationStopsTheNextDelivery(t *testing.T) {
	e := chatEngine(t)
	pub := chatSession(t, e, "alice-token", "chat.messages")
	sub := chatSession(t, e, "bob-token", "chat.messages")
	first := make(chan struct{})
	release := make(chan struct{})
	var mu sync.Mutex
	var got []int
	s, err := sub.Subscribe(ctx, "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		got = append(got, int(d.Message.Sequence))
		n := len(got)
		mu.Unlock()
		if n == 1 {
			close(first)
			<-release
		}
		return nil
	})
	require.NoError(t, err)
	_, err = pub.Publish(ctx, chat(0))
	require.NoError(t, err)
	<-first
	for i := 1; i <= 50; i++ {
		_, err = pub.Publish(ctx, chat(i))
		require.NoError(t, err)
	}
	bob, err := e.Authenticate(ctx, "bob-token")
	require.NoError(t, err)
	require.NoError(t, e.RevokeContract(ctx, bob, sub.Contract().ID()))
	close(release)
	<-s.Done()
	requireCode(t, s.Err(), pigeon.CodeContractRevoked)
	mu.Lock()
	require.Equal(t, []int{1}, got, "nothing after the revocation")
	mu.Unlock()
}

// TestAtMostOnceDoesNotRetry: a failing handler of an at-most-once
// subscription sees each message once; an acknowledged subscription's
// handler sees it again.
func TestAtMostOnceDoesNotRetry(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []pigeon.SubscribeOption
		calls int
	}{
		{"at most once", []pigeon.SubscribeOption{pigeon.WithAtMostOnce()}, 1},
		{"acknowledged", nil, pigeon.DefaultMaxAttempts},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := chatEngine(t)
			pub := chatSession(t, e, "alice-token", "chat.messages")
			sub := chatSession(t, e, "bob-token", "chat.messages")
			calls := make(chan int, 10)
			_, err := sub.Subscribe(ctx, "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
				calls <- d.Attempt
				return errors.New("failed")
			}, tc.opts...)
			require.NoError(t, err)
			_, err = pub.Publish(ctx, chat(1))
			require.NoError(t, err)
			var seen []int
			for len(seen) < tc.calls {
				seen = append(seen, <-calls)
			}
			select {
			case a := <-calls:
				t.Fatalf("attempt %d after %v", a, seen)
			case <-time.After(100 * time.Millisecond):
			}
			for i, a := range seen {
				require.Equal(t, i+1, a)
			}
		})
	}
}

func TestAtMostOnceRefusedOnWorkQueue(t *testing.T) {
	e := chatEngine(t)
	crew := chatSession(t, e, "crew-token", "jobs.run")
	_, err := crew.Subscribe(ctx, "jobs.run", func(context.Context, *pigeon.Delivery) error { return nil }, pigeon.WithAtMostOnce())
	requireCode(t, err, pigeon.CodeInvalidArgument)
}

// TestWorkQueueAcksRecordedPerBatch: a work-queue subscriber's
// acknowledgements settle in the store and are recorded in range records.
func TestWorkQueueAcksRecordedPerBatch(t *testing.T) {
	e := chatEngine(t)
	boss := chatSession(t, e, "boss-token", "jobs.run")
	crew := chatSession(t, e, "crew-token", "jobs.run")
	const n = 300
	for i := range n {
		_, err := boss.Publish(ctx, &pigeon.Message{Type: "job", Subject: "jobs.run", Intent: "run", Data: []byte(`{"n":` + strconv.Itoa(i) + `}`)})
		require.NoError(t, err)
	}
	done := make(chan struct{})
	var mu sync.Mutex
	seen := map[string]bool{}
	s, err := crew.Subscribe(ctx, "jobs.run", func(_ context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		seen[d.Message.ID] = true
		if len(seen) == n {
			close(done)
		}
		return nil
	}, pigeon.WithMaxInFlight(32))
	require.NoError(t, err)
	<-done
	require.NoError(t, s.Unsubscribe(ctx))
	// Nothing comes back: every job is done for the group.
	msgs, err := crew.Receive(ctx, "jobs.run", 10)
	require.NoError(t, err)
	require.Empty(t, msgs)
	recs, err := e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	acked, records := 0, 0
	for _, r := range recs {
		if r.Type == string(pigeon.EventDeliveryAcked) && r.Ref == s.ID() {
			n, ok := store.CountSeqs(r.Seqs)
			require.True(t, ok)
			require.EqualValues(t, r.Count, n)
			acked += r.Count
			records++
		}
	}
	require.Equal(t, n, acked)
	require.Less(t, records, n/2)
}

// TestDeliveryRecordsInOrder: the audit log tells each message's story in
// the order it happened, whatever the window and however the handler
// answers: handed over, then refused, then handed over again (pub/sub
// and work queue alike), then acknowledged. Answers come back while the loop is still
// handing a batch over; they are recorded after the batch's dispatch
// record, never before it.
func TestDeliveryRecordsInOrder(t *testing.T) {
	refuse := func(n int) bool { return n%3 == 0 }
	for _, tc := range []struct {
		name, pubToken, subToken, subject string
		msg                               func(i int) *pigeon.Message
		opts                              []pigeon.SubscribeOption
	}{
		{"pubsub in flight 8", "alice-token", "bob-token", "chat.messages", chat, []pigeon.SubscribeOption{pigeon.WithMaxInFlight(8), pigeon.WithStart(pigeon.StartFirst)}},
		{"pubsub one at a time", "alice-token", "bob-token", "chat.messages", chat, []pigeon.SubscribeOption{pigeon.WithMaxInFlight(1), pigeon.WithStart(pigeon.StartFirst)}},
		{"work queue in flight 8", "boss-token", "crew-token", "jobs.run", func(i int) *pigeon.Message {
			return &pigeon.Message{Type: "job", Subject: "jobs.run", Intent: "run", Data: []byte(`{"n":` + strconv.Itoa(i) + `}`)}
		}, []pigeon.SubscribeOption{pigeon.WithMaxInFlight(8), pigeon.WithGroup("crew")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := chatEngine(t)
			pub := chatSession(t, e, tc.pubToken, tc.subject)
			const n = 300
			ids := make([]string, n)
			for i := range n {
				res, err := pub.Publish(ctx, tc.msg(i))
				require.NoError(t, err)
				ids[i] = res.Message.ID
			}
			sub := chatSession(t, e, tc.subToken, tc.subject)
			var mu sync.Mutex
			acked := 0
			all := make(chan struct{})
			s, err := sub.Subscribe(ctx, tc.subject, func(_ context.Context, d *pigeon.Delivery) error {
				var m struct{ N int }
				require.NoError(t, json.Unmarshal(d.Message.Data, &m))
				if refuse(m.N) && d.Attempt == 1 {
					return pigeon.RetryAfter(0, nil)
				}
				mu.Lock()
				defer mu.Unlock()
				if acked++; acked == n {
					close(all)
				}
				return nil
			}, tc.opts...)
			require.NoError(t, err)
			select {
			case <-all:
			case <-time.After(30 * time.Second):
				t.Fatal("not every message was acknowledged")
			}
			require.NoError(t, s.Unsubscribe(ctx))

			for i, id := range ids {
				rs, err := e.Receipts(ctx, id)
				require.NoError(t, err)
				var story []pigeon.Event
				for _, r := range rs {
					story = append(story, r.Event)
				}
				want := []pigeon.Event{pigeon.EventDeliveryDispatched, pigeon.EventDeliveryAcked}
				if refuse(i) { // handed over again, and recorded so
					want = []pigeon.Event{pigeon.EventDeliveryDispatched, pigeon.EventDeliveryNacked, pigeon.EventDeliveryDispatched, pigeon.EventDeliveryAcked}
				}
				require.Equal(t, want, story, "message %d (%s)", i, id)
			}
		})
	}
}

// TestRefusalsHeldAreBounded: refusal records wait for the subscription's
// loop (which records them after the deliveries they answer), and count
// toward the answers that make it record: a subscriber that refuses a long
// backlog holds about a batch of them, not the backlog's, and every one is
// recorded.
func TestRefusalsHeldAreBounded(t *testing.T) {
	opts := transporttest.Options()
	for i, s := range opts.Catalog.Subjects {
		if s.Name == "chat.messages" {
			opts.Catalog.Subjects[i].Delivery.Retry.MaxAttempts = 1 // refused once: exhausted
		}
	}
	e, err := pigeon.New(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	pub := chatSession(t, e, "alice-token", "chat.messages")
	const n = 1500
	for i := range n {
		_, err := pub.Publish(ctx, chat(i))
		require.NoError(t, err)
	}
	sub := chatSession(t, e, "bob-token", "chat.messages")
	most, handled := 0, 0
	all := make(chan struct{})
	s, err := sub.Subscribe(ctx, "chat.messages", func(ctx context.Context, _ *pigeon.Delivery) error {
		// One in flight: the handler runs on the loop, one at a time.
		most = max(most, pigeon.RecordsHeld(ctx))
		if handled++; handled == n {
			close(all)
		}
		return errors.New("refused")
	}, pigeon.WithStart(pigeon.StartFirst), pigeon.WithMaxInFlight(1))
	require.NoError(t, err)
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		t.Fatal("not every message was handed over")
	}
	records := func(ev pigeon.Event) int {
		recs := 0
		for _, r := range auditOf(t, e, ev) {
			if r.Ref == s.ID() {
				recs++
			}
		}
		return recs
	}
	// The last refusals are recorded though the subscription goes idle.
	require.Eventually(t, func() bool { return records(pigeon.EventDeliveryExhausted) == n }, 30*time.Second, 5*time.Millisecond)
	require.Equal(t, n, records(pigeon.EventDeliveryNacked))
	require.NoError(t, s.Unsubscribe(ctx))
	require.Positive(t, most)
	require.LessOrEqual(t, most, 2*256+2, "a nacked and an exhausted record per message, recorded every 256 answers")
}
