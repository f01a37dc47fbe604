package pigeon_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestPolicyChangeEndsStaleSubscriptionsAtOnce: replacing a subject's
// policy ends the idle subscriptions of contracts compiled from the old
// version with CONTRACT_STALE at once, not at their next delivery (which
// may never come, the client holding a dead subscription meanwhile);
// reloading the identical policy ends none, and a subscription on another
// subject goes on.
func TestPolicyChangeEndsStaleSubscriptionsAtOnce(t *testing.T) {
	ctx := context.Background()
	rules := []pigeon.RuleSpec{{Effect: pigeon.EffectAllow, Principals: []string{"alice"}}}
	policy := func(name, version string) pigeon.SubjectPolicy {
		return pigeon.SubjectPolicy{Name: name, Version: version, Mode: pigeon.ModePubSub, Intents: []string{"chat"},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: rules, pigeon.OpReceive: rules}}
	}
	e, err := pigeon.New(ctx, &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(pigeon.StaticToken{Token: "alice-token", Principal: "alice"}),
		Catalog:       &pigeon.Catalog{Subjects: []pigeon.SubjectPolicy{policy("chat", "v1"), policy("news", "v1")}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	s, err := e.Connect(ctx, "alice-token", []string{"chat"})
	require.NoError(t, err)
	other, err := e.Connect(ctx, "alice-token", []string{"news"})
	require.NoError(t, err)
	got := make(chan struct{}, 16)
	handler := func(context.Context, *pigeon.Delivery) error { got <- struct{}{}; return nil }
	sub, err := s.Subscribe(ctx, "chat", handler)
	require.NoError(t, err)
	otherSub, err := other.Subscribe(ctx, "news", handler)
	require.NoError(t, err)
	_, err = s.Publish(ctx, &pigeon.Message{Subject: "chat", Type: "chat.message", Source: "test", Intent: "chat", Data: json.RawMessage(`{"text":"hello"}`)})
	require.NoError(t, err)
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the first message was not delivered")
	}
	time.Sleep(50 * time.Millisecond) // idle: nothing more to deliver

	require.NoError(t, e.ReplaceSubject(ctx, policy("chat", "v1")), "the identical policy")
	select {
	case <-sub.Done():
		t.Fatalf("reloading the identical policy ended the subscription: %v", sub.Err())
	case <-time.After(100 * time.Millisecond):
	}

	require.NoError(t, e.ReplaceSubject(ctx, policy("chat", "v2")))
	select {
	case <-sub.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the stale subscription stayed up")
	}
	require.Equal(t, pigeon.CodeContractStale, pigeon.ErrorCode(sub.Err()))
	select {
	case <-otherSub.Done():
		t.Fatalf("a subscription on another subject ended: %v", otherSub.Err())
	default:
	}
}
