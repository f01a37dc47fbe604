package transporttest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

func testNegotiationDenied(t *testing.T, h Harness) {
	ctx := context.Background()
	_, err := h.Connect(ctx, "catalog-token", []string{"payments.authorize"})
	requireCode(t, err, pigeon.CodeNoPermittedSubjects)
	_, err = h.Connect(ctx, "nobody-token", []string{"payments.authorize"})
	requireCode(t, err, pigeon.CodeUnauthenticated)
	_, err = h.Connect(ctx, "checkout-token", []string{"no.such.subject"})
	requireCode(t, err, pigeon.CodeSubjectNotFound)
}

func testRevocation(t *testing.T, h Harness) {
	ctx := context.Background()
	alice := connect(t, h, "alice-token", "chat.messages")
	bob := connect(t, h, "bob-token", "chat.messages")
	var got collector
	sub, err := bob.Subscribe(ctx, "chat.messages", got.handler)
	require.NoError(t, err)
	_, err = alice.Publish(ctx, chat("lobby", "before"))
	require.NoError(t, err)
	eventually(t, func() bool { return got.len() == 1 }, "delivery before revocation")
	p, err := h.Engine.Authenticate(ctx, "bob-token")
	require.NoError(t, err)
	require.NoError(t, h.Engine.RevokeContract(ctx, p, bob.Contract().ID()))
	select {
	case <-sub.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("subscription did not stop on revocation")
	}
	requireCode(t, sub.Err(), pigeon.CodeContractRevoked)
	_, err = alice.Publish(ctx, chat("lobby", "after"))
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, 1, got.len(), "no delivery after revocation")
	_, err = bob.Publish(ctx, chat("lobby", "x"))
	requireCode(t, err, pigeon.CodeContractRevoked)
	recs, err := h.Engine.Audit(ctx, 0, 0)
	require.NoError(t, err)
	found := false
	for _, r := range recs {
		if r.Type == "subscription.stopped" && r.Code == string(pigeon.CodeContractRevoked) {
			found = true
		}
	}
	require.True(t, found, "the stop is audited")
}

// testSessionRenews: a session whose contract lives 600 ms keeps working
// for three lifetimes under the same contract id, renewing it in place by
// itself, and its subscription, which runs under it, goes on; dialed
// WithoutAutoRenew, the subscription ends CONTRACT_EXPIRED at the first
// expiry.
func testSessionRenews(t *testing.T, h Harness) {
	if h.ConnectWith == nil {
		t.Skip("the harness cannot pass connect options")
	}
	const life = 600 * time.Millisecond
	for _, auto := range []bool{true, false} {
		t.Run(map[bool]string{true: "renews itself", false: "without auto renew"}[auto], func(t *testing.T) {
			ctx := context.Background()
			opts := []pigeon.ConnectOption{pigeon.WithContractTTL(life)}
			if !auto {
				opts = append(opts, pigeon.WithoutAutoRenew())
			}
			bob, err := h.ConnectWith(ctx, "bob-token", []string{"chat.messages"}, opts...)
			require.NoError(t, err)
			t.Cleanup(func() { _ = bob.Close(context.Background()) })
			alice := connect(t, h, "alice-token", "chat.messages")
			k := bob.Contract()
			first := k.ExpiresAt()
			got := make(chan string, 64)
			sub, err := bob.Subscribe(ctx, "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
				got <- string(d.Message.Data)
				return nil
			})
			require.NoError(t, err)
		publish:
			for i := 0; time.Now().Before(first.Add(2 * life)); i++ {
				if !auto && time.Now().After(first) {
					break
				}
				text := "n" + strconv.Itoa(i)
				_, err := alice.Publish(ctx, chat("lobby", text))
				require.NoError(t, err)
				select {
				case m := <-got:
					require.Contains(t, m, text)
				case <-sub.Done():
					// Without renewal the subscription ends at the expiry,
					// which may come between a publish and its delivery.
					if auto || time.Now().Before(first) {
						t.Fatalf("the subscription ended before its contract expired: %v", sub.Err())
					}
					break publish
				case <-time.After(10 * time.Second):
					t.Fatalf("message %d not delivered: %v", i, sub.Err())
				}
				time.Sleep(50 * time.Millisecond)
			}
			if !auto {
				select {
				case <-sub.Done():
				case <-time.After(10 * time.Second):
					t.Fatal("the subscription outlived its contract")
				}
				requireCode(t, sub.Err(), pigeon.CodeContractExpired)
				return
			}
			require.NoError(t, sub.Err())
			require.Equal(t, k.ID(), bob.Contract().ID(), "renewed, not replaced")
			require.True(t, bob.Contract().ExpiresAt().After(first.Add(2*life)), "renewed in place: %v", bob.Contract().ExpiresAt())
			_, err = bob.Publish(ctx, chat("lobby", "mine"))
			require.NoError(t, err, "the renewed contract admits publishes past the old expiry")
		})
	}
}
