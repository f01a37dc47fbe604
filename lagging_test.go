package pigeon_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
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
