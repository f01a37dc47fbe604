package pigeon_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestTrimmedMessagesAreNotServedFromTheCache: the engine keeps the
// latest messages of a subject decoded in memory for its subscribers; a
// subscription that starts at an older sequence than the subject's first
// retained one read them from there, so messages retention had removed
// (past retention.messagesMs, or beyond retention.maxMessages) were
// still handed to a new subscriber. It gets only what the store holds.
func TestTrimmedMessagesAreNotServedFromTheCache(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*pigeon.Options)
		pass   func(*fixture)
	}{
		{"by age", nil, func(f *fixture) { f.clock.Advance(2 * time.Hour) }},
		{"by count", func(o *pigeon.Options) {
			for i, s := range o.Catalog.Subjects {
				if s.Name == "chat.messages" {
					o.Catalog.Subjects[i].Retention.MessagesMs = 0
					o.Catalog.Subjects[i].Retention.MaxMessages = 1
				}
			}
		}, func(*fixture) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mutate []func(*pigeon.Options)
			if tc.mutate != nil {
				mutate = append(mutate, tc.mutate)
			}
			f, st := retentionFixture(t, time.Hour, mutate...)
			pub := f.connect("alice-token", "chat.messages")
			// A subscriber from the start: the fan-out runs, and the
			// cache holds what it routed.
			early, err := pub.Subscribe(ctx, "chat.messages", func(context.Context, *pigeon.Delivery) error { return nil })
			require.NoError(t, err)
			defer early.Unsubscribe(ctx)
			for i := range 3 {
				_, err := pub.Publish(ctx, chat(i))
				require.NoError(t, err)
			}
			tc.pass(f)
			f.e.EnforceRetention(ctx)
			first, _, err := st.Bounds(ctx, "chat.messages")
			require.NoError(t, err)
			require.Greater(t, first, uint64(1), "retention trimmed")

			got := make(chan uint64, 16)
			sub := f.connect("bob-token", "chat.messages")
			s, err := sub.Subscribe(ctx, "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
				got <- d.Message.Sequence
				return nil
			}, pigeon.WithStart(pigeon.StartAt(1)))
			require.NoError(t, err)
			defer s.Unsubscribe(ctx)
			_, err = pub.Publish(ctx, chat(99))
			require.NoError(t, err)
			var seqs []uint64
			for len(seqs) == 0 || seqs[len(seqs)-1] < 4 {
				select {
				case seq := <-got:
					seqs = append(seqs, seq)
				case <-time.After(10 * time.Second):
					t.Fatalf("got %v, want up to 4", seqs)
				}
			}
			for _, seq := range seqs {
				require.GreaterOrEqual(t, seq, first, "got %v: a message retention removed", seqs)
			}
		})
	}
}
