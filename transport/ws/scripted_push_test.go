package ws_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// entryOf is an entry of a list, a delivery as its handler got it, or an
// ack as the server read it: its message's id, its attempt (a
// delivery's, or a receive's "attempts"; 0 in a subscription's acks,
// which name none) and its sequence.
type entryOf struct {
	id      string
	attempt int
	seq     uint64
}

// idsOf are the message ids of entries, in order.
func idsOf(entries []entryOf) []string {
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.id)
	}
	return ids
}

// scriptedPush subscribes to subject on a scripted server that pushes
// frames on s1, the last of them a well-formed deliver of the message
// last, and logs to logs; once last is handled it ends the subscription
// and returns the deliveries handed to the handler and the acks the
// server read, the connection known to have stayed up.
func scriptedPush(t *testing.T, subject string, frames []string, last string, logs slog.Handler) (seen, acked []entryOf) {
	t.Helper()
	var mu sync.Mutex
	srv := newScriptedServer(t, func(f *ws.Frame) []string {
		switch f.Op {
		case ws.OpSubscribe:
			return append([]string{subscribedFrame(f, "s1")}, frames...)
		case ws.OpAck:
			mu.Lock()
			if f.MessageID != "" {
				acked = append(acked, entryOf{f.MessageID, f.Attempt, f.Sequence})
			}
			for i, id := range f.MessageIDs {
				acked = append(acked, entryOf{id, 0, f.Sequences[i]})
			}
			mu.Unlock()
		}
		return []string{okFrame(f)}
	})
	ctx := context.Background()
	s, err := ws.Dial(ctx, srv.url, "token", []string{subject}, ws.WithLogger(slog.New(logs)))
	require.NoError(t, err)
	defer s.Close(ctx)
	sub, err := s.Subscribe(ctx, subject, func(_ context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		seen = append(seen, entryOf{d.Message.ID, d.Attempt, d.Message.Sequence})
		mu.Unlock()
		return nil
	})
	require.NoError(t, err)
	// One worker hands deliveries over in order: once the last one is
	// handled, those before it were.
	eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) > 0 && seen[len(seen)-1].id == last
	}, "the delivery after those under test handled")
	// Unsubscribe sends the acks of the deliveries handled before it
	// ends the subscription.
	require.NoError(t, sub.Unsubscribe(ctx))
	require.NoError(t, s.Err(), "a refused delivery does not end the connection")
	mu.Lock()
	defer mu.Unlock()
	return seen, acked
}
