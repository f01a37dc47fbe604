package pigeon_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

// A pubsub subscriber that stops taking deliveries falls behind the
// fan-out: its queue fills and it catches up from the engine's recent
// cache and the store on its own, then goes live again. Whatever the
// depth of the lag (within the queue, within the cache, beyond it), it
// gets every message once and in order, and what comes after it has
// caught up arrives too.
func TestLaggingSubscriberGetsEverythingOnce(t *testing.T) {
	for _, n := range []int{100, 3000, 10000} {
		t.Run(itoa(n), func(t *testing.T) {
			pub, sub := chatSessions(t, nil)
			release, unblock := gate(t)
			var (
				mu   sync.Mutex
				seqs []uint64
				all  = make(chan struct{})
				want = n + 10
			)
			s, err := sub.Subscribe(ctx, "chat.messages", func(ctx context.Context, d *pigeon.Delivery) error {
				<-release
				mu.Lock()
				defer mu.Unlock()
				seqs = append(seqs, d.Message.Sequence)
				if len(seqs) == want {
					close(all)
				}
				return nil
			})
			require.NoError(t, err)
			t.Cleanup(func() { unblock(); _ = s.Unsubscribe(context.Background()) })

			var first uint64
			for i := range n {
				if seq := publishChat(t, pub, itoa(i)); i == 0 {
					first = seq
				}
			}
			unblock()
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(seqs) >= n
			}, 30*time.Second, time.Millisecond)
			for i := range 10 {
				publishChat(t, pub, "after "+itoa(i))
			}
			select {
			case <-all:
			case <-time.After(30 * time.Second):
				t.Fatal("the messages published after the catch-up did not all arrive")
			}
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, seqs, want)
			for i, seq := range seqs {
				require.Equal(t, first+uint64(i), seq, "delivery %d", i)
			}
		})
	}
}

// countingStore counts the message reads of the store it wraps.
type countingStore struct {
	*memory.Store
	reads atomic.Int64
}

func (s *countingStore) Read(ctx context.Context, subject string, from uint64, max int) ([]store.Message, error) {
	s.reads.Add(1)
	return s.Store.Read(ctx, subject, from, max)
}

// A lagging subscriber whose missed messages were trimmed from the store
// (and are gone from the engine's recent cache) finds nothing to read
// though the fan-out stands past it: it waits for the fan-out's next move
// rather than read again and again, and takes the next message published.
func TestLaggingSubscriberPastTrimmedMessagesWaits(t *testing.T) {
	st := &countingStore{Store: memory.New(nil)}
	pub, sub := chatSessions(t, st)
	release, unblock := gate(t)
	var mu sync.Mutex
	var seqs []uint64
	s, err := sub.Subscribe(ctx, "chat.messages", func(ctx context.Context, d *pigeon.Delivery) error {
		<-release
		mu.Lock()
		seqs = append(seqs, d.Message.Sequence)
		mu.Unlock()
		return nil
	})
	require.NoError(t, err)
	t.Cleanup(func() { unblock(); _ = s.Unsubscribe(context.Background()) })
	for i := range 10000 { // past the subscriber's queue and the recent cache
		publishChat(t, pub, itoa(i))
	}
	_, err = st.TrimBefore(ctx, "chat.messages", time.Now().Add(time.Hour))
	require.NoError(t, err)
	unblock()

	// It hands over what it held, then finds the rest trimmed.
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(seqs) }
	require.Eventually(t, func() bool {
		n := count()
		time.Sleep(20 * time.Millisecond)
		return n > 0 && count() == n
	}, 30*time.Second, time.Millisecond)
	before := st.reads.Load()
	time.Sleep(200 * time.Millisecond)
	// About four reads in 200 ms (it rechecks every 50 ms when nothing
	// moves); reading in a loop would make hundreds of thousands.
	require.Less(t, st.reads.Load()-before, int64(100), "store reads while nothing changes")

	last := publishChat(t, pub, "after the trim")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seqs) > 0 && seqs[len(seqs)-1] == last
	}, 30*time.Second, time.Millisecond, "the message after the trim arrives")
}

// chatSessions starts an engine on the transport suite's options (and st,
// unless nil) and connects a publisher and a subscriber of chat.messages.
func chatSessions(t *testing.T, st store.Store) (pub, sub pigeon.Session) {
	t.Helper()
	opts := transporttest.Options()
	if st != nil {
		opts.Store = st
	}
	opts.MaxContractsPerPrincipal, opts.NegotiateRate.PerSecond = -1, -1
	e, err := pigeon.New(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	pub, err = e.Connect(ctx, "alice-token", []string{"chat.messages"})
	require.NoError(t, err)
	sub, err = e.Connect(ctx, "bob-token", []string{"chat.messages"})
	require.NoError(t, err)
	return pub, sub
}

// gate returns a channel a handler waits on and the function that opens
// it, which the test's cleanup calls too (before the engine's shutdown
// waits for the handler; a cleanup registered later that waits for the
// handler must open it first), so that a failing test does not hang.
func gate(t *testing.T) (<-chan struct{}, func()) {
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open)
	return release, open
}

// publishChat publishes a chat message carrying text and returns its
// sequence.
func publishChat(t *testing.T, pub pigeon.Session, text string) uint64 {
	t.Helper()
	res, err := pub.Publish(ctx, &pigeon.Message{Type: "chat.message", Subject: "chat.messages", Intent: "chat",
		Data: []byte(`{"kind":"chat","room":"lobby","text":"` + text + `"}`)})
	require.NoError(t, err)
	return res.Message.Sequence
}
