package pigeon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testlog"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

// panicEngine is chatEngine with its log kept in logs and, when st is not
// nil, st as its store.
func panicEngine(t *testing.T, logs *testlog.Buffer, st store.Store) *pigeon.Engine {
	t.Helper()
	opts := transporttest.Options()
	opts.RetryBase = time.Millisecond
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	opts.Store = st
	e, err := pigeon.New(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		// Bounded: a subscription wedged by a panic held Shutdown for ever.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, e.Shutdown(ctx))
	})
	return e
}

// callerFor negotiates subject for token and returns the caller a
// transport would subscribe as.
func callerFor(t *testing.T, e *pigeon.Engine, token, subject string) pigeon.Caller {
	t.Helper()
	return callerOf(chatSession(t, e, token, subject))
}

// explodes reports whether a message is the one the faulty code below
// panics on.
func explodes(data []byte) bool { return bytes.Contains(data, []byte("explode")) }

// TestHandlerPanicEndsOnlyItsSubscription: a transport's
// asynchronous handler (the WebSocket server's, for one) that panics on a
// message ends its own subscription, INTERNAL, and the delivery spends
// its attempt; the broker, the other subscriptions and the message go on.
// The panic is logged with its stack, a card number in it redacted.
// Before, a panic on a redelivery (its own goroutine) ended the process,
// here the test binary; one on a first delivery (the delivery loop) left
// the loop wedged for ever in its deferred end, waiting for the delivery
// to settle: the subscription never stopped, its leases were never given
// back, and Shutdown never returned.
func TestHandlerPanicEndsOnlyItsSubscription(t *testing.T) {
	chatMsg := func(text string) *pigeon.Message {
		return &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: json.RawMessage(`{"kind":"chat","text":"` + text + `"}`)}
	}
	for _, tc := range []struct {
		name, subject, pub, sub string
		msg                     func(text string) *pigeon.Message
		panicAt                 int // the attempt the handler panics on; it fails those before
	}{
		{"pubsub", "chat.messages", "alice-token", "bob-token", chatMsg, 1},
		{"pubsub redelivery", "chat.messages", "alice-token", "bob-token", chatMsg, 2},
		{"work queue", "jobs.run", "boss-token", "crew-token", func(text string) *pigeon.Message {
			return &pigeon.Message{Type: "job", Subject: "jobs.run", Intent: "run", Data: json.RawMessage(`{"kind":"` + text + `"}`)}
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &testlog.Buffer{}
			e := panicEngine(t, logs, nil)
			pub := chatSession(t, e, tc.pub, tc.subject)
			caller := callerFor(t, e, tc.sub, tc.subject)
			faulty, err := e.SubscribeAsync(ctx, caller, tc.subject, func(_ context.Context, d *pigeon.Delivery, done func(error)) {
				switch {
				case !explodes(d.Message.Data):
					done(nil)
				case d.Attempt < tc.panicAt:
					done(errors.New("not yet"))
				default:
					panic("explode, card 4111111111111111")
				}
			}, pigeon.WithStart(pigeon.StartFirst))
			require.NoError(t, err)

			_, err = pub.Publish(ctx, tc.msg("explode"))
			require.NoError(t, err)
			requireStopped(t, faulty, pigeon.CodeInternal)
			require.Contains(t, logs.String(), "a subscription's handler panicked")
			require.Contains(t, logs.String(), "[REDACTED]")
			require.NotContains(t, logs.String(), "4111111111111111")

			// The broker goes on: a subscriber that does not panic gets
			// the message (on a work queue, again, its first attempt
			// spent) and the next.
			got := make(chan *pigeon.Delivery, 4)
			healthy, err := e.Subscribe(ctx, caller, tc.subject, func(_ context.Context, d *pigeon.Delivery) error {
				got <- d
				return nil
			}, pigeon.WithStart(pigeon.StartFirst))
			require.NoError(t, err)
			t.Cleanup(func() { _ = healthy.Unsubscribe(ctx) })
			_, err = pub.Publish(ctx, tc.msg("after"))
			require.NoError(t, err)
			var texts []string
			for len(texts) < 2 {
				select {
				case d := <-got:
					texts = append(texts, string(d.Message.Data))
					if explodes(d.Message.Data) && tc.subject == "jobs.run" {
						require.Equal(t, 2, d.Attempt, "the panic spent the first attempt")
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("the healthy subscriber got %q", texts)
				}
			}
			// A work queue hands the message back after its backoff: the
			// two may come in either order.
			require.ElementsMatch(t, []string{string(tc.msg("explode").Data), string(tc.msg("after").Data)}, texts)
		})
	}
}

// readPanicStore panics when a read returns a message whose data holds
// "explode", as a store with a bug might on what a publisher sent.
type readPanicStore struct{ store.Store }

func (s readPanicStore) Read(ctx context.Context, subject string, from uint64, max int) ([]store.Message, error) {
	ms, err := s.Store.Read(ctx, subject, from, max)
	for _, m := range ms {
		if explodes(m.Body) {
			panic("explode reading " + subject + ", card 4111111111111111")
		}
	}
	return ms, err
}

// TestDeliveryLoopPanicEndsOnlyItsSubscription: a panic in a
// subscription's delivery loop itself (here the store's read of what it
// catches up on) ends that subscription, INTERNAL and audited, not the
// process; other subscriptions start and deliver on. Before, it ended the
// test binary.
func TestDeliveryLoopPanicEndsOnlyItsSubscription(t *testing.T) {
	mem := memory.New(nil)
	t.Cleanup(func() { _ = mem.Close(context.Background()) })
	// A first engine writes the message; the second, over the same
	// store, holds nothing of it in its cache and reads it from the store.
	{
		logs := &testlog.Buffer{}
		e := panicEngine(t, logs, mem)
		pub := chatSession(t, e, "alice-token", "chat.messages")
		_, err := pub.Publish(ctx, chat(1))
		require.NoError(t, err)
		_, err = pub.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: json.RawMessage(`{"kind":"explode"}`)})
		require.NoError(t, err)
		require.NoError(t, pub.Close(ctx))
		require.NoError(t, e.Shutdown(ctx))
	}
	logs := &testlog.Buffer{}
	e := panicEngine(t, logs, readPanicStore{mem})
	caller := callerFor(t, e, "bob-token", "chat.messages")
	faulty, err := e.Subscribe(ctx, caller, "chat.messages", func(context.Context, *pigeon.Delivery) error { return nil },
		pigeon.WithStart(pigeon.StartFirst))
	require.NoError(t, err)
	requireStopped(t, faulty, pigeon.CodeInternal)
	require.Contains(t, logs.String(), "a subscription's delivery loop panicked")
	require.NotContains(t, logs.String(), "4111111111111111")
	require.Equal(t, 1, refusalCount(t, e, pigeon.EventSubscriptionStopped, pigeon.CodeInternal))

	pub := chatSession(t, e, "alice-token", "chat.messages")
	got := make(chan uint64, 4)
	live, err := e.Subscribe(ctx, caller, "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
		got <- d.Message.Sequence
		return nil
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = live.Unsubscribe(ctx) })
	_, err = pub.Publish(ctx, chat(3))
	require.NoError(t, err)
	select {
	case seq := <-got:
		require.Equal(t, uint64(3), seq)
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery after the panic")
	}
}

// markPanicStore panics the first time it is asked to mark messages of a
// consumer group done, as a store with a bug might, holding the group's
// lock then.
type markPanicStore struct {
	*memory.Store
	fired atomic.Bool
}

func (s *markPanicStore) MarkDoneBatch(ctx context.Context, key store.GroupKey, seqs []uint64) error {
	if s.fired.CompareAndSwap(false, true) {
		panic("explode marking " + key.Group + " done")
	}
	return s.Store.MarkDoneBatch(ctx, key, seqs)
}

func (s *markPanicStore) MarkDone(ctx context.Context, key store.GroupKey, seq uint64) error {
	if s.fired.CompareAndSwap(false, true) {
		panic("explode marking " + key.Group + " done")
	}
	return s.Store.MarkDone(ctx, key, seq)
}

// TestSettlePanicGivesTheGroupBack: a panic while a work-queue
// subscription settles its consumer's answers in the store, under its
// group's lock, ends that subscription alone, and the group is not left
// locked: the subscription's end takes the lock to give its leases back,
// and another consumer of the group is handed the job again. Before, the
// lock stayed taken, the end waited on it for ever, and Shutdown with it.
func TestSettlePanicGivesTheGroupBack(t *testing.T) {
	st := &markPanicStore{Store: memory.New(nil)}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	logs := &testlog.Buffer{}
	e := panicEngine(t, logs, st)
	pub := chatSession(t, e, "boss-token", "jobs.run")
	caller := callerFor(t, e, "crew-token", "jobs.run")
	first, err := e.Subscribe(ctx, caller, "jobs.run", func(context.Context, *pigeon.Delivery) error { return nil })
	require.NoError(t, err)
	_, err = pub.Publish(ctx, &pigeon.Message{Type: "job", Subject: "jobs.run", Intent: "run", Data: json.RawMessage(`{"kind":"x"}`)})
	require.NoError(t, err)
	requireStopped(t, first, pigeon.CodeInternal)
	require.Contains(t, logs.String(), "panicked")

	got := make(chan int, 2)
	second, err := e.Subscribe(ctx, caller, "jobs.run", func(_ context.Context, d *pigeon.Delivery) error {
		got <- d.Attempt
		return nil
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = second.Unsubscribe(ctx) })
	select {
	case <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the job was not handed out again")
	}
}
