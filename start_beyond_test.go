package pigeon_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A subscription started past the subject's end cannot be at a position
// of the subject as it stands (it was numbered anew: the broker lost its
// store), so it starts at the first message retained rather than waiting,
// silently, for the new numbering to reach it. A start at the end, or
// within the subject, is kept.
func TestStartBeyondTheEnd(t *testing.T) {
	for _, tc := range []struct {
		name      string
		published int
		start     uint64
		from      uint64
		want      []uint64 // after one more publish
	}{
		{"within", 3, 2, 2, []uint64{2, 3, 4}},
		{"at the end", 3, 4, 4, []uint64{4}},
		{"beyond the end", 3, 10, 1, []uint64{1, 2, 3, 4}},
		{"one past the end", 3, 5, 1, []uint64{1, 2, 3, 4}},
		{"nothing published yet", 0, 5000, 1, []uint64{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := chatEngine(t)
			pub := chatSession(t, e, "alice-token", "chat.messages")
			for i := range tc.published {
				_, err := pub.Publish(ctx, chat(i))
				require.NoError(t, err)
			}
			sub := chatSession(t, e, "bob-token", "chat.messages")
			got := make(chan uint64, 16)
			s, err := sub.Subscribe(ctx, "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
				got <- d.Message.Sequence
				return nil
			}, pigeon.WithStart(pigeon.StartAt(tc.start)))
			require.NoError(t, err)
			defer s.Unsubscribe(ctx)
			require.Equal(t, tc.from, s.(interface{ From() uint64 }).From())
			_, err = pub.Publish(ctx, chat(99))
			require.NoError(t, err)
			var seqs []uint64
			for range tc.want {
				select {
				case seq := <-got:
					seqs = append(seqs, seq)
				case <-time.After(10 * time.Second):
					t.Fatalf("got %v, want %v", seqs, tc.want)
				}
			}
			require.Equal(t, tc.want, seqs)
		})
	}
}
