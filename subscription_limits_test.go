package pigeon_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/wire"
)

func nopHandler(context.Context, *pigeon.Delivery) error { return nil }

// subscribeN subscribes n times to chat.messages through s.
func subscribeN(t *testing.T, s pigeon.Session, n int) []pigeon.Subscription {
	t.Helper()
	subs := make([]pigeon.Subscription, n)
	for i := range subs {
		sub, err := s.Subscribe(ctx, "chat.messages", nopHandler)
		require.NoError(t, err, "subscription %d", i+1)
		subs[i] = sub
	}
	return subs
}

func waitEnded(t *testing.T, sub pigeon.Subscription) {
	t.Helper()
	select {
	case <-sub.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription did not end")
	}
}

// TestSubscriptionsPerPrincipalAreCapped: a principal runs at most
// Options.MaxSubscriptionsPerPrincipal subscriptions over all its sessions;
// one more is refused TOO_MANY_SUBSCRIPTIONS (HTTP 429) and audited, and
// every way a subscription ends frees its place, once.
func TestSubscriptionsPerPrincipalAreCapped(t *testing.T) {
	f := accessFixture(t, func(o *pigeon.Options) { o.MaxSubscriptionsPerPrincipal = 3 })
	bob1 := f.connect("bob-token", "chat.messages")
	bob2 := f.connect("bob-token", "chat.messages")

	_, err := bob1.Subscribe(ctx, "no.such.subject", nopHandler)
	requireCode(t, err, pigeon.CodeSubjectNotFound) // a refused subscription takes no place
	held := append(subscribeN(t, bob1, 2), subscribeN(t, bob2, 1)...)
	_, err = bob2.Subscribe(ctx, "chat.messages", nopHandler)
	pe := requireCode(t, err, pigeon.CodeTooManySubscriptions)
	require.Equal(t, http.StatusTooManyRequests, wire.HTTPStatus(pe.Code))
	require.Equal(t, 1, auditCount(t, f.e, pigeon.EventSubscribeDenied, pigeon.CodeTooManySubscriptions), "the refusal is audited")

	alice := f.connect("alice-token", "chat.messages")
	subscribeN(t, alice, 3) // another principal has its own count

	// Unsubscribing frees one place, however often it is called.
	require.NoError(t, held[0].Unsubscribe(ctx))
	require.NoError(t, held[0].Unsubscribe(ctx))
	held[0] = subscribeN(t, bob2, 1)[0]
	_, err = bob1.Subscribe(ctx, "chat.messages", nopHandler)
	requireCode(t, err, pigeon.CodeTooManySubscriptions)

	// Closing a session frees the places of its subscriptions.
	require.NoError(t, bob1.Close(ctx))
	waitEnded(t, held[1])
	onBob2 := append([]pigeon.Subscription{held[0], held[2]}, subscribeN(t, bob2, 1)...)
	_, err = bob2.Subscribe(ctx, "chat.messages", nopHandler)
	requireCode(t, err, pigeon.CodeTooManySubscriptions)

	// A revoked contract ends its subscriptions, and frees their places.
	p, err := f.e.Authenticate(ctx, "bob-token")
	require.NoError(t, err)
	require.NoError(t, f.e.RevokeContract(ctx, p, bob2.Contract().ID()))
	for _, sub := range onBob2 {
		waitEnded(t, sub)
	}
	bob3 := f.connect("bob-token", "chat.messages")
	subscribeN(t, bob3, 3)
	_, err = bob3.Subscribe(ctx, "chat.messages", nopHandler)
	requireCode(t, err, pigeon.CodeTooManySubscriptions)
}

// TestSubscriptionCapUnderConcurrency: subscriptions raced from many
// goroutines never exceed the cap, and the places freed by unsubscribing
// them all can be taken again.
func TestSubscriptionCapUnderConcurrency(t *testing.T) {
	const limit, tries = 10, 64
	f := accessFixture(t, func(o *pigeon.Options) { o.MaxSubscriptionsPerPrincipal = limit })
	bob := f.connect("bob-token", "chat.messages")
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		held    []pigeon.Subscription
		refused atomic.Int32
	)
	for range tries {
		wg.Go(func() {
			sub, err := bob.Subscribe(ctx, "chat.messages", nopHandler)
			if err != nil {
				requireCode(t, err, pigeon.CodeTooManySubscriptions)
				refused.Add(1)
				return
			}
			mu.Lock()
			held = append(held, sub)
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Len(t, held, limit)
	require.EqualValues(t, tries-limit, refused.Load())
	for _, sub := range held {
		wg.Go(func() { require.NoError(t, sub.Unsubscribe(ctx)) })
	}
	wg.Wait()
	subscribeN(t, bob, limit)
}

// TestSubscriptionCapDefaults: the cap is
// DefaultMaxSubscriptionsPerPrincipal when the option is zero, and a
// negative option lifts it.
func TestSubscriptionCapDefaults(t *testing.T) {
	f := accessFixture(t)
	bob := f.connect("bob-token", "chat.messages")
	subscribeN(t, bob, pigeon.DefaultMaxSubscriptionsPerPrincipal)
	_, err := bob.Subscribe(ctx, "chat.messages", nopHandler)
	requireCode(t, err, pigeon.CodeTooManySubscriptions)

	f = accessFixture(t, func(o *pigeon.Options) { o.MaxSubscriptionsPerPrincipal = -1 })
	bob = f.connect("bob-token", "chat.messages")
	subscribeN(t, bob, pigeon.DefaultMaxSubscriptionsPerPrincipal+1)
}
