package transporttest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

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

// testBadMessageRefusedAlone: a message whose data or envelope field is
// not UTF-8 is refused INVALID_UTF8, and one whose data nests too deeply
// ENVELOPE_INVALID, that message alone: the session goes on publishing.
// (Over WebSocket the text frame carrying the first would not be UTF-8,
// which ends the connection, and the server cannot read, nor answer, a
// frame nesting far too deeply: the client refuses both first.)
func testBadMessageRefusedAlone(t *testing.T, h Harness) {
	ctx := context.Background()
	s := connect(t, h, "alice-token", "chat.messages")
	deep := func(levels int) func(m *pigeon.Message) {
		return func(m *pigeon.Message) {
			m.Data = json.RawMessage(`{"kind":"chat","x":` + strings.Repeat("[", levels-1) + strings.Repeat("]", levels-1) + `}`)
		}
	}
	for _, tc := range []struct {
		name string
		edit func(m *pigeon.Message)
		code pigeon.Code
	}{
		{"data not UTF-8", func(m *pigeon.Message) { m.Data = json.RawMessage("{\"kind\":\"chat\",\"text\":\"a\xffb\"}") }, pigeon.CodeInvalidUTF8},
		{"type not UTF-8", func(m *pigeon.Message) { m.Type = "ch\xffat" }, pigeon.CodeInvalidUTF8},
		{"idempotency key not UTF-8", func(m *pigeon.Message) { m.IdempotencyKey = "k\xff" }, pigeon.CodeInvalidUTF8},
		{"correlation id not UTF-8", func(m *pigeon.Message) { m.CorrelationID = "c\xfe" }, pigeon.CodeInvalidUTF8},
		{"signature not UTF-8", func(m *pigeon.Message) { m.Signature = &pigeon.Signature{KID: "k\xff", Alg: "Ed25519", Sig: "x"} }, pigeon.CodeInvalidUTF8},
		{"data a level too deep", deep(pigeon.MaxJSONDepth + 1), pigeon.CodeEnvelopeInvalid},
		{"data far too deep", deep(4 * pigeon.MaxJSONDepth), pigeon.CodeEnvelopeInvalid},
	} {
		m := chat("lobby", tc.name)
		tc.edit(m)
		// Bounded: an unanswered publish fails REQUEST_TIMEOUT, not the suite.
		bounded, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := s.Publish(bounded, m)
		cancel()
		requireCode(t, err, tc.code)
		res, err := s.Publish(ctx, chat("lobby", "after "+tc.name))
		require.NoError(t, err, "the session goes on")
		require.Equal(t, pigeon.StatusAccepted, res.Status)
	}
	ok := chat("lobby", "deep enough")
	deep(pigeon.MaxJSONDepth)(ok)
	_, err := s.Publish(ctx, ok)
	require.NoError(t, err, "data nesting as deeply as allowed is accepted")
}

// testSchemaJudgesNumbersAsSent: the schema gate judges each number as
// the text the publisher sent, which the store keeps and receivers read,
// not as the double it decodes to: 100.0000000000000001 is above
// "maximum": 100 and no integer, though its double is 100.
func testSchemaJudgesNumbersAsSent(t *testing.T, h Harness) {
	ctx := context.Background()
	s := connect(t, h, "alice-token", "stock.levels")
	for _, tc := range []struct {
		qty string
		ok  bool
	}{
		{"100", true},
		{"1e2", true},
		{"99.0", true},
		{"100.0000000000000001", false},
		{"1.0000000000000001", false},
		{"-0.00000000000000000001", false},
		{"101", false},
		{"1.5", false},
	} {
		m := &pigeon.Message{Type: "stock.level", Subject: "stock.levels", Intent: "count",
			Data: json.RawMessage(`{"qty":` + tc.qty + `}`)}
		_, err := s.Publish(ctx, m)
		if tc.ok {
			require.NoError(t, err, tc.qty)
		} else {
			requireCode(t, err, pigeon.CodeSchemaInvalid)
		}
	}
}
