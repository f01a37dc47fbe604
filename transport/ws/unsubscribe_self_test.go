package ws_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestUnsubscribeFromItsOwnHandler: a handler that unsubscribes its own
// subscription, or closes its session, with the context it was given does
// not wait for itself: the call returns, the handler returns, and the
// subscription ends; nothing is handed over after it. Before, the call
// waited for every running handler, the caller included, until its
// context ended (forever with a context that does not).
func TestUnsubscribeFromItsOwnHandler(t *testing.T) {
	for _, tc := range []struct {
		name  string
		end   func(ctx context.Context, s pigeon.Session, sub pigeon.Subscription) error
		inFlt int
	}{
		{"unsubscribe", func(ctx context.Context, _ pigeon.Session, sub pigeon.Subscription) error {
			return sub.Unsubscribe(ctx)
		}, 1},
		{"unsubscribe, several in flight", func(ctx context.Context, _ pigeon.Session, sub pigeon.Subscription) error {
			return sub.Unsubscribe(ctx)
		}, 4},
		{"close the session", func(ctx context.Context, s pigeon.Session, _ pigeon.Subscription) error { return s.Close(ctx) }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newEnv(t, nil)
			ctx := context.Background()
			bob := v.dial(t, "bob-token", []string{"chat.messages"})
			subCh := make(chan pigeon.Subscription, 1)
			returned := make(chan error, 10)
			var calls atomic.Int32
			sub, err := bob.Subscribe(ctx, "chat.messages", func(hctx context.Context, d *pigeon.Delivery) error {
				if calls.Add(1) == 1 {
					sub := <-subCh
					returned <- tc.end(hctx, d.Session, sub)
				}
				return nil
			}, pigeon.WithMaxInFlight(tc.inFlt))
			require.NoError(t, err)
			subCh <- sub
			alice := v.dial(t, "alice-token", []string{"chat.messages"})
			for i := range 3 {
				_, err := alice.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat",
					Data: []byte(`{"kind":"chat","room":"lobby","n":` + strconv.Itoa(i) + `}`)})
				require.NoError(t, err)
			}
			select {
			case err := <-returned:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("the call from the handler waited for the handler")
			}
			select {
			case <-sub.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the subscription did not end once the handler returned")
			}
			require.NoError(t, sub.Err())
			if tc.inFlt == 1 {
				time.Sleep(100 * time.Millisecond)
				require.EqualValues(t, 1, calls.Load(), "nothing handed over after the unsubscribe")
			}
		})
	}
}
