package pigeon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/internal/testlog"
)

// panickyGate panics on a message whose data holds "boom", as a gate of
// the application's (or a library a built-in gate calls) might on what a
// sender chose.
var panickyGate = pigeon.GateFunc("panicky", func(_ context.Context, a *pigeon.Admission) pigeon.Verdict {
	if bytes.Contains(a.Message.Data, []byte("boom")) {
		panic("boom in " + a.Message.Subject + ", card 4111111111111111")
	}
	return pigeon.Allow()
})

// TestGatePanicRefusesTheMessage: a gate that panics on a message refused
// it INTERNAL, audited, logged with the gate's name and the panic (a card
// number in it redacted), and the broker goes
// on: a publish, each message of a batch on its own, and a reply. Before,
// the panic left Publish, which over WebSocket runs on a worker goroutine
// and ended the broker's process.
func TestGatePanicRefusesTheMessage(t *testing.T) {
	logs := &testlog.Buffer{}
	f := newFixture(t, func(o *pigeon.Options) {
		o.Gates = []pigeon.Gate{panickyGate}
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	orders := f.connect("orders-token", "notifications.send")
	boom := demo.Notification("k-boom")
	boom.Data = json.RawMessage(`{"recipientId":"boom@example.com","channel":"email","templateId":"order-shipped"}`)

	var err error
	require.NotPanics(t, func() { _, err = orders.Publish(ctx, boom) })
	requireCode(t, err, pigeon.CodeInternal)
	require.ErrorContains(t, err, "gate panicky failed on this message")
	require.Contains(t, logs.String(), "a gate panicked")
	require.Contains(t, logs.String(), "gate=panicky")

	fine := demo.Notification("k-fine")
	res, err := orders.Publish(ctx, fine)
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusAccepted, res.Status)

	boom2 := demo.Notification("k-boom-2")
	boom2.Data = boom.Data
	var out []pigeon.Published
	require.NotPanics(t, func() {
		out = f.e.PublishBatch(ctx, callerOf(orders), []*pigeon.Message{demo.Notification("k-a"), boom2, demo.Notification("k-b")})
	})
	require.Len(t, out, 3)
	require.NoError(t, out[0].Err)
	requireCode(t, out[1].Err, pigeon.CodeInternal)
	require.NoError(t, out[2].Err)

	recs, err := f.e.Audit(ctx, 0, 1000)
	require.NoError(t, err)
	denied := 0
	for _, r := range recs {
		if r.Type == string(pigeon.EventPublishDenied) && r.Gate == "panicky" && r.Code == string(pigeon.CodeInternal) {
			denied++
		}
	}
	require.Equal(t, 2, denied, "each refusal is audited")
	// A reply passes the application's gates too.
	checkout := f.connect("checkout-token", "payments.authorize")
	gateway := f.connect("gateway-token", "payments.authorize")
	req := demo.Payment("o-asked")
	req.ID = "req-o-asked"
	short, cancel := contextWithTimeout(50 * time.Millisecond)
	_, err = checkout.Request(short, req)
	cancel()
	requireCode(t, err, pigeon.CodeRequestTimeout)
	got, err := gateway.Receive(ctx, "payments.authorize", 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	answer := demo.Approval(req.ID)
	answer.Data = json.RawMessage(`{"approved":true,"note":"boom"}`)
	require.NotPanics(t, func() { _, err = gateway.Publish(ctx, answer) })
	requireCode(t, err, pigeon.CodeInternal)
	_, err = gateway.Publish(ctx, demo.Approval(req.ID))
	require.NoError(t, err, "the replier goes on")

	require.Contains(t, logs.String(), "boom in notifications.send")
	require.False(t, strings.Contains(logs.String(), "4111111111111111"), "a card number in the panic is redacted in the log")
}
