package pigeon_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// A reply whose reply.routed record the audit log cannot write is refused
// and never handed to the requester: the broker does not act without
// evidence. The requester gets the reply sent once the log is whole again.
func TestReplyTheAuditLogCannotRecordIsNotHandedOver(t *testing.T) {
	st, e := failingAuditEngine(t, nil)
	checkout, err := e.Connect(ctx, "checkout-token", []string{"payments.authorize"})
	require.NoError(t, err)
	gateway, err := e.Connect(ctx, "gateway-token", []string{"payments.authorize"})
	require.NoError(t, err)

	done := requestAsync(t, checkout, demo.Payment("o-1"))
	req := receiveOne(t, gateway, "payments.authorize")

	st.fail.Store(true)
	refused := demo.Approval(req.ID)
	refused.Data = json.RawMessage(`{"approved":false}`)
	_, err = gateway.Publish(ctx, refused)
	requireCode(t, err, pigeon.CodeStoreFull)

	st.fail.Store(false)
	_, err = gateway.Publish(ctx, demo.Approval(req.ID))
	require.NoError(t, err)
	got := <-done
	require.NoError(t, got.err)
	require.JSONEq(t, `{"approved":true}`, string(got.m.Data), "the requester got the reply the log recorded")
}

// A replay whose replay.executed record the audit log cannot write hands
// nothing over: the record is the evidence (with its reason) that the
// messages were read again.
func TestReplayTheAuditLogCannotRecordHandsNothingOver(t *testing.T) {
	st, e := failingAuditEngine(t, nil)
	orders, err := e.Connect(ctx, "orders-token", []string{"notifications.send"})
	require.NoError(t, err)
	_, err = orders.Publish(ctx, demo.Notification("k-1"))
	require.NoError(t, err)
	replayer, err := e.Connect(ctx, "notify-replay-token", []string{"notifications.send"})
	require.NoError(t, err)

	st.fail.Store(true)
	got, err := replayer.Replay(ctx, pigeon.ReplayRequest{Subject: "notifications.send", Reason: "audit"})
	requireCode(t, err, pigeon.CodeStoreFull)
	require.Empty(t, got)

	st.fail.Store(false)
	got, err = replayer.Replay(ctx, pigeon.ReplayRequest{Subject: "notifications.send", Reason: "audit"})
	require.NoError(t, err)
	require.Len(t, got, 1)
}

// A subscription whose subscription.started record the audit log cannot
// write does not start: nothing is delivered under it, and it takes no
// place among the principal's subscriptions.
func TestSubscriptionTheAuditLogCannotRecordDoesNotStart(t *testing.T) {
	st, e := failingAuditEngine(t, nil)
	orders, err := e.Connect(ctx, "orders-token", []string{"notifications.send"})
	require.NoError(t, err)
	notifier, err := e.Connect(ctx, "notifier-token", []string{"notifications.send"})
	require.NoError(t, err)
	handled := make(chan string, 10)
	handler := func(_ context.Context, d *pigeon.Delivery) error {
		handled <- d.Message.ID
		return nil
	}

	st.fail.Store(true)
	_, err = notifier.Subscribe(ctx, "notifications.send", handler)
	requireCode(t, err, pigeon.CodeStoreFull)

	st.fail.Store(false)
	sub, err := notifier.Subscribe(ctx, "notifications.send", handler)
	require.NoError(t, err)
	res, err := orders.Publish(ctx, demo.Notification("k-1"))
	require.NoError(t, err)
	select {
	case id := <-handled:
		require.Equal(t, res.Message.ID, id, "the subscription that started gets it")
	case <-time.After(30 * time.Second):
		require.Fail(t, "nothing was delivered")
	}
	require.NoError(t, sub.Unsubscribe(ctx))
	require.Empty(t, handled, "and it alone: the refused one never ran")
}
