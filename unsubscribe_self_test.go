package pigeon_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestUnsubscribeFromItsOwnHandler: an in-process handler that
// unsubscribes its own subscription with the context it was given gets
// nil at once (before, Unsubscribe waited for the subscription's end,
// which waits for the caller, and returned context.Canceled), and the
// subscription ends once the handler returns, nothing handed over after.
func TestUnsubscribeFromItsOwnHandler(t *testing.T) {
	f := accessFixture(t) // the transports' catalog: alice and bob on chat.messages
	alice := f.connect("alice-token", "chat.messages")
	bob := f.connect("bob-token", "chat.messages")
	subCh := make(chan pigeon.Subscription, 1)
	returned := make(chan error, 1)
	var calls atomic.Int32
	sub, err := bob.Subscribe(ctx, "chat.messages", func(hctx context.Context, _ *pigeon.Delivery) error {
		if calls.Add(1) == 1 {
			returned <- (<-subCh).Unsubscribe(hctx)
		}
		return nil
	})
	require.NoError(t, err)
	subCh <- sub
	for range 3 {
		_, err := alice.Publish(ctx, chatMessage("lobby"))
		require.NoError(t, err)
	}
	select {
	case err := <-returned:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Unsubscribe from the handler waited for the handler")
	}
	select {
	case <-sub.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription did not end once the handler returned")
	}
	require.NoError(t, sub.Err())
	require.EqualValues(t, 1, calls.Load(), "nothing handed over after the unsubscribe")
}
