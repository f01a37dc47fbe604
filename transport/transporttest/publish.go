package transporttest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

func testPublishReceiveAck(t *testing.T, h Harness) {
	ctx := context.Background()
	orders := connect(t, h, "orders-token", "notifications.send")
	worker := connect(t, h, "notifier-token", "notifications.send")
	res, err := orders.Publish(ctx, demo.Notification("k-1"))
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusAccepted, res.Status)
	require.Equal(t, demo.Orders, res.Message.Source)
	dup, err := orders.Publish(ctx, demo.Notification("k-1"))
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusDuplicate, dup.Status)
	require.Equal(t, res.Message.ID, dup.Message.ID)
	got, err := worker.Receive(ctx, "notifications.send", 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, res.Message.ID, got[0].ID)
	require.NoError(t, worker.Ack(ctx, "notifications.send", got[0].ID))
	require.NoError(t, worker.Ack(ctx, "notifications.send", got[0].ID))
	requireCode(t, worker.Ack(ctx, "notifications.send", "msg_nope"), pigeon.CodeMessageNotFound)
	_, err = worker.Publish(ctx, demo.Notification("k-2"))
	requireCode(t, err, pigeon.CodeOperationNotInContract)
	ops := connect(t, h, "notify-replay-token", "notifications.send")
	_, err = ops.Replay(ctx, pigeon.ReplayRequest{Subject: "notifications.send"})
	requireCode(t, err, pigeon.CodeReplayDenied)
	again, err := ops.Replay(ctx, pigeon.ReplayRequest{Subject: "notifications.send", Reason: "audit"})
	require.NoError(t, err)
	require.Len(t, again, 1)
}

func testDenialIsTypedError(t *testing.T, h Harness) {
	ctx := context.Background()
	s := connect(t, h, "checkout-token", "payments.authorize")
	m := demo.Payment("o-1")
	m.Data = json.RawMessage(`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP","paymentToken":"4111111111111111"}`)
	_, err := s.Publish(ctx, m)
	pe := requireCode(t, err, pigeon.CodeRawPANDetected)
	require.ErrorIs(t, err, pigeon.ErrDenied)
	require.NotEmpty(t, pe.Details["quarantineId"])
	require.NotContains(t, err.Error(), "4111111111111111")
	m = demo.Payment("o-2")
	m.Subject = "notifications.send"
	_, err = s.Publish(ctx, m)
	requireCode(t, err, pigeon.CodeSubjectNotInContract)
}

// testInvalidUTF8RefusedAlone: a message whose data or envelope field is
// not UTF-8 is refused INVALID_UTF8, that message alone: the session goes
// on publishing. (Over WebSocket the text frame carrying it would not be
// UTF-8, which ends the connection: the client refuses it first.)
func testInvalidUTF8RefusedAlone(t *testing.T, h Harness) {
	ctx := context.Background()
	s := connect(t, h, "alice-token", "chat.messages")
	for _, tc := range []struct {
		name string
		edit func(m *pigeon.Message)
	}{
		{"data", func(m *pigeon.Message) { m.Data = json.RawMessage("{\"kind\":\"chat\",\"text\":\"a\xffb\"}") }},
		{"type", func(m *pigeon.Message) { m.Type = "ch\xffat" }},
		{"idempotency key", func(m *pigeon.Message) { m.IdempotencyKey = "k\xff" }},
		{"correlation id", func(m *pigeon.Message) { m.CorrelationID = "c\xfe" }},
		{"signature", func(m *pigeon.Message) { m.Signature = &pigeon.Signature{KID: "k\xff", Alg: "Ed25519", Sig: "x"} }},
	} {
		m := chat("lobby", tc.name)
		tc.edit(m)
		_, err := s.Publish(ctx, m)
		requireCode(t, err, pigeon.CodeInvalidUTF8)
		res, err := s.Publish(ctx, chat("lobby", "after "+tc.name))
		require.NoError(t, err, "the session goes on")
		require.Equal(t, pigeon.StatusAccepted, res.Status)
	}
}
