package pigeon_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// reader is one way to read a subject in pages: a pull receive (work
// queue or pub/sub cursor) or a replay from the sequence after the last.
type reader struct {
	name    string
	fixture func(t *testing.T, budget int) *fixture
	// publish stores five messages; read asks for up to ten after those
	// already read.
	publish func(t *testing.T, f *fixture)
	read    func(t *testing.T, f *fixture, after uint64) []*pigeon.Message
}

func readers() []reader {
	withBudget := func(budget int) func(*pigeon.Options) {
		return func(o *pigeon.Options) { o.MaxReadBytes = budget }
	}
	return []reader{
		{
			name:    "work-queue receive",
			fixture: func(t *testing.T, budget int) *fixture { return evictFixture(t, withBudget(budget)) },
			publish: func(t *testing.T, f *fixture) { publishTasks(t, f.connect("boss-token", "tasks.run"), 1, 5) },
			read: func(t *testing.T, f *fixture, _ uint64) []*pigeon.Message {
				msgs, err := f.connect("alice-token", "tasks.run").Receive(ctx, "tasks.run", 10)
				require.NoError(t, err)
				return msgs
			},
		},
		{
			name:    "pub/sub cursor receive",
			fixture: func(t *testing.T, budget int) *fixture { return evictFixture(t, withBudget(budget)) },
			publish: func(t *testing.T, f *fixture) {
				alice := f.connect("alice-token", "chat.messages")
				for range 5 {
					_, err := alice.Publish(ctx, &pigeon.Message{Type: "chat.message", Subject: "chat.messages", Intent: "chat",
						Data: []byte(`{"kind":"chat","room":"lobby","text":"hello"}`)})
					require.NoError(t, err)
				}
			},
			read: func(t *testing.T, f *fixture, _ uint64) []*pigeon.Message {
				msgs, err := f.connect("bob-token", "chat.messages").Receive(ctx, "chat.messages", 10)
				require.NoError(t, err)
				return msgs
			},
		},
		{
			name:    "replay",
			fixture: func(t *testing.T, budget int) *fixture { return newFixture(t, withBudget(budget)) },
			publish: func(t *testing.T, f *fixture) {
				orders := f.connect("orders-token", "notifications.send")
				for _, k := range []string{"k-1", "k-2", "k-3", "k-4", "k-5"} {
					_, err := orders.Publish(ctx, demo.Notification(k))
					require.NoError(t, err)
				}
			},
			read: func(t *testing.T, f *fixture, after uint64) []*pigeon.Message {
				msgs, err := f.connect("notify-replay-token", "notifications.send").Replay(ctx,
					pigeon.ReplayRequest{Subject: "notifications.send", Reason: "incident-7", FromSequence: after + 1, Max: 10})
				require.NoError(t, err)
				return msgs
			},
		},
	}
}

// TestReadsStopAtTheByteBudget: a replay or pull receive returns at most
// Options.MaxReadBytes of messages, but always one when there is one; the
// messages it leaves are neither lost nor leased, and come in order on
// the next reads. With the default budget, one read takes all five.
func TestReadsStopAtTheByteBudget(t *testing.T) {
	require.Equal(t, 16<<20, pigeon.DefaultMaxReadBytes)
	for _, r := range readers() {
		t.Run(r.name, func(t *testing.T) {
			f := r.fixture(t, 1) // below any message: one a read
			r.publish(t, f)
			var seqs []uint64
			var last uint64
			for range 5 {
				msgs := r.read(t, f, last)
				require.Len(t, msgs, 1, "the budget stops the read after one message")
				last = msgs[0].Sequence
				seqs = append(seqs, last)
			}
			require.Equal(t, []uint64{1, 2, 3, 4, 5}, seqs, "in order, none lost, none twice")
			require.Empty(t, r.read(t, f, last))

			f = r.fixture(t, 0)
			r.publish(t, f)
			require.Len(t, r.read(t, f, 0), 5, "the default budget holds all five")
		})
	}
}
