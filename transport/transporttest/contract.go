package transporttest

import (
	"context"
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
