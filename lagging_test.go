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
			opts := transporttest.Options()
			opts.MaxContractsPerPrincipal, opts.NegotiateRate.PerSecond = -1, -1
			e, err := pigeon.New(context.Background(), opts)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
			pub, err := e.Connect(ctx, "alice-token", []string{"chat.messages"})
			require.NoError(t, err)
			sub, err := e.Connect(ctx, "bob-token", []string{"chat.messages"})
			require.NoError(t, err)

			release := make(chan struct{})
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
			t.Cleanup(func() { _ = s.Unsubscribe(context.Background()) })

			var first uint64
			for i := range n {
				res, err := pub.Publish(ctx, &pigeon.Message{Type: "chat.message", Subject: "chat.messages", Intent: "chat",
					Data: []byte(`{"kind":"chat","room":"lobby","text":"` + itoa(i) + `"}`)})
				require.NoError(t, err)
				if i == 0 {
					first = res.Message.Sequence
				}
			}
			close(release)
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(seqs) >= n
			}, 30*time.Second, time.Millisecond)
			for i := range 10 {
				_, err := pub.Publish(ctx, &pigeon.Message{Type: "chat.message", Subject: "chat.messages", Intent: "chat",
					Data: []byte(`{"kind":"chat","room":"lobby","text":"after ` + itoa(i) + `"}`)})
				require.NoError(t, err)
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
	opts := transporttest.Options()
	opts.Store = st
	opts.MaxContractsPerPrincipal, opts.NegotiateRate.PerSecond = -1, -1
	e, err := pigeon.New(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	pub, err := e.Connect(ctx, "alice-token", []string{"chat.messages"})
	require.NoError(t, err)
	sub, err := e.Connect(ctx, "bob-token", []string{"chat.messages"})
	require.NoError(t, err)

	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
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
	t.Cleanup(func() { _ = s.Unsubscribe(context.Background()) })
	publish := func(text string) uint64 {
		res, err := pub.Publish(ctx, &pigeon.Message{Type: "chat.message", Subject: "chat.messages", Intent: "chat",
			Data: []byte(`{"kind":"chat","room":"lobby","text":"` + text + `"}`)})
		require.NoError(t, err)
		return res.Message.Sequence
	}
	for i := range 10000 { // past the subscriber's queue and the recent cache
		publish(itoa(i))
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

	last := publish("after the trim")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seqs) > 0 && seqs[len(seqs)-1] == last
	}, 10*time.Second, time.Millisecond, "the message after the trim arrives")
}
