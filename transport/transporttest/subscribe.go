package transporttest

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

func testSubscribeWithSelector(t *testing.T, h Harness) {
	ctx := context.Background()
	alice := connect(t, h, "alice-token", "chat.messages")
	bob := connect(t, h, "bob-token", "chat.messages")
	var lobby, all collector
	sub, err := bob.Subscribe(ctx, "chat.messages", lobby.handler, pigeon.WithSelector("/kind=chat/room=lobby"))
	require.NoError(t, err)
	_, err = bob.Subscribe(ctx, "chat.messages", all.handler)
	require.NoError(t, err)
	for i, room := range []string{"lobby", "kitchen", "lobby", "garden"} {
		_, err := alice.Publish(ctx, chat(room, fmt.Sprint(i)))
		require.NoError(t, err)
	}
	eventually(t, func() bool { return all.len() == 4 }, "all messages, got %d", all.len())
	eventually(t, func() bool { return lobby.len() == 2 }, "lobby messages")
	require.Equal(t, []string{"0", "2"}, lobby.texts())
	require.Equal(t, []string{"0", "1", "2", "3"}, all.texts())
	require.NotEmpty(t, sub.ID())
	require.NoError(t, sub.Unsubscribe(ctx))
	require.NoError(t, sub.Unsubscribe(ctx))
	<-sub.Done()
	require.NoError(t, sub.Err())
	_, err = alice.Publish(ctx, chat("lobby", "after"))
	require.NoError(t, err)
	eventually(t, func() bool { return all.len() == 5 }, "the other subscription goes on")
	require.Equal(t, 2, lobby.len(), "no delivery after unsubscribe")
}

func testFanOut(t *testing.T, h Harness) {
	ctx := context.Background()
	alice := connect(t, h, "alice-token", "chat.messages")
	const subs, n = 3, 50
	cols := make([]*collector, subs)
	for i := range cols {
		cols[i] = &collector{}
		s := connect(t, h, "bob-token", "chat.messages")
		_, err := s.Subscribe(ctx, "chat.messages", cols[i].handler)
		require.NoError(t, err)
	}
	var want []string
	for i := range n {
		want = append(want, fmt.Sprint(i))
		_, err := alice.Publish(ctx, chat("lobby", fmt.Sprint(i)))
		require.NoError(t, err)
	}
	for i, c := range cols {
		eventually(t, func() bool { return c.len() == n }, "subscriber %d got %d", i, c.len())
		require.Equal(t, want, c.texts(), "in sequence order")
	}
}

func testStartPositions(t *testing.T, h Harness) {
	ctx := context.Background()
	alice := connect(t, h, "alice-token", "chat.messages")
	for i := range 3 {
		_, err := alice.Publish(ctx, chat("lobby", fmt.Sprint(i)))
		require.NoError(t, err)
	}
	bob := connect(t, h, "bob-token", "chat.messages")
	var first, at, fresh collector
	_, err := bob.Subscribe(ctx, "chat.messages", first.handler, pigeon.WithStart(pigeon.StartFirst))
	require.NoError(t, err)
	_, err = bob.Subscribe(ctx, "chat.messages", at.handler, pigeon.WithStart(pigeon.StartAt(2)))
	require.NoError(t, err)
	_, err = bob.Subscribe(ctx, "chat.messages", fresh.handler)
	require.NoError(t, err)
	_, err = alice.Publish(ctx, chat("lobby", "3"))
	require.NoError(t, err)
	eventually(t, func() bool { return first.len() == 4 && at.len() == 3 && fresh.len() == 1 }, "start positions: %d %d %d", first.len(), at.len(), fresh.len())
	require.Equal(t, []string{"1", "2", "3"}, at.texts())
	require.Equal(t, []string{"3"}, fresh.texts())
}

func testSubscribeBadInput(t *testing.T, h Harness) {
	ctx := context.Background()
	bob := connect(t, h, "bob-token", "chat.messages")
	nop := func(context.Context, *pigeon.Delivery) error { return nil }
	tests := []struct {
		name    string
		subject string
		opts    []pigeon.SubscribeOption
		code    pigeon.Code
	}{
		{"unknown subject", "no.such", nil, pigeon.CodeSubjectNotFound},
		{"subject outside contract", "payments.authorize", nil, pigeon.CodeSubjectNotInContract},
		{"bad selector", "chat.messages", []pigeon.SubscribeOption{pigeon.WithSelector("kind=chat")}, pigeon.CodeSelectorInvalid},
		{"bad filter", "chat.messages", []pigeon.SubscribeOption{pigeon.WithFilter("message.data.x ==")}, pigeon.CodeFilterInvalid},
		{"max in flight negative", "chat.messages", []pigeon.SubscribeOption{pigeon.WithMaxInFlight(-1)}, pigeon.CodeInvalidArgument},
		{"max in flight too large", "chat.messages", []pigeon.SubscribeOption{pigeon.WithMaxInFlight(pigeon.MaxInFlightLimit + 1)}, pigeon.CodeInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := bob.Subscribe(ctx, tc.subject, nop, tc.opts...)
			requireCode(t, err, tc.code)
		})
	}
	notifier := connect(t, h, "orders-token", "notifications.send")
	_, err := notifier.Subscribe(ctx, "notifications.send", nop)
	requireCode(t, err, pigeon.CodeOperationNotInContract)
}

func testSlowSubscriber(t *testing.T, h Harness) {
	ctx := context.Background()
	alice := connect(t, h, "alice-token", "chat.messages")
	slow := connect(t, h, "bob-token", "chat.messages")
	fast := connect(t, h, "bob-token", "chat.messages")
	block := make(chan struct{})
	var slowGot collector
	_, err := slow.Subscribe(ctx, "chat.messages", func(ctx context.Context, d *pigeon.Delivery) error {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return slowGot.handler(ctx, d)
	})
	require.NoError(t, err)
	var fastGot collector
	_, err = fast.Subscribe(ctx, "chat.messages", fastGot.handler)
	require.NoError(t, err)
	const n = 600 // more than a live queue holds
	for i := range n {
		_, err := alice.Publish(ctx, chat("lobby", fmt.Sprint(i)))
		require.NoError(t, err)
	}
	eventually(t, func() bool { return fastGot.len() == n }, "the fast subscriber gets everything while the slow one is stuck (%d)", fastGot.len())
	close(block)
	eventually(t, func() bool { return slowGot.len() == n }, "the slow subscriber catches up (%d)", slowGot.len())
	texts := slowGot.texts()
	sorted := append([]string(nil), texts...)
	sort.SliceStable(sorted, func(i, j int) bool { return atoi(sorted[i]) < atoi(sorted[j]) })
	require.Equal(t, sorted, texts, "in order, without gaps or repeats")
}

func atoi(s string) int {
	n := 0
	fmt.Sscan(s, &n)
	return n
}
