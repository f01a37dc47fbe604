package ws_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/transporttest"
	"pigeon/transport/ws"
)

// TestRevocationCutsQueuedAnswers: the answers that carry messages (a
// receive's, a replay's, a request's reply) wait in the write queue behind
// whatever a slow reader has not read yet, as deliveries do. When the
// contract is revoked meanwhile, none of them is written any more: each
// call is answered with the refusal instead. Before, the messages a
// receive returned and the reply to a request went out after the
// revocation.
func TestRevocationCutsQueuedAnswers(t *testing.T) {
	v := newEnv(t, &ws.Options{WriteQueue: 4096, WriteQueueBytes: 512 << 20, ServerQueueBytes: 1 << 30, PublishRate: -1},
		func(o *pigeon.Options) {
			both := []string{transporttest.Alice, transporttest.Bob}
			o.Catalog.Subjects = append(o.Catalog.Subjects, pigeon.SubjectPolicy{
				Name: "chat.ask", Version: "v1", Mode: pigeon.ModeRequestReply, Intents: []string{"chat"},
				Policy: map[pigeon.Operation][]pigeon.RuleSpec{
					pigeon.OpPublish: {{Effect: "allow", Principals: both}},
					pigeon.OpReceive: {{Effect: "allow", Principals: both}},
					pigeon.OpAck:     {{Effect: "allow", Principals: both}},
				},
			})
			for i := range o.Catalog.Subjects {
				if s := &o.Catalog.Subjects[i]; s.Name == "chat.messages" {
					s.Replay.Allowed = true
					s.Policy = map[pigeon.Operation][]pigeon.RuleSpec{
						pigeon.OpPublish: {{Effect: "allow", Principals: both}},
						pigeon.OpReceive: {{Effect: "allow", Principals: both}},
						pigeon.OpAck:     {{Effect: "allow", Principals: both}},
						pigeon.OpReplay:  {{Effect: "allow", Principals: both}},
					}
				}
			}
		})
	ctx := context.Background()
	text := strings.Repeat("x", 64<<10)
	alice, err := v.e.Connect(ctx, "alice-token", []string{"chat.messages", "chat.ask"})
	require.NoError(t, err)
	defer alice.Close(ctx)
	_, err = alice.Subscribe(ctx, "chat.ask", func(ctx context.Context, d *pigeon.Delivery) error {
		_, err := d.Session.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat.ask", Intent: "chat",
			CorrelationID: d.Message.ID, Data: json.RawMessage(`{"text":"` + text + `"}`)})
		return err
	})
	require.NoError(t, err)

	bob := v.raw(t, "bob-token")
	info := bob.negotiate("chat.messages", "chat.ask")
	bob.ok(ws.OpSubscribe, `,"subject":"chat.messages","ack":"none"`, ws.OpSubscribed)

	// Bob reads nothing while 400 messages of 64 KiB (25 MiB) are
	// published: most wait in the write queue.
	const n = 400
	for i := range n {
		_, err := alice.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat",
			Data: json.RawMessage(`{"kind":"chat","room":"lobby","n":` + strconv.Itoa(i) + `,"text":"` + text + `"}`)})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return v.srv.Stats().QueuedBytes > 8<<20 }, 30*time.Second, 10*time.Millisecond,
		"deliveries wait in the write queue")

	// Three calls whose answers carry messages: 3 × 64 KiB from receive,
	// as much from replay, 64 KiB in the reply. They are judged now, and
	// their answers queue behind the deliveries.
	before := v.srv.Stats().QueuedBytes
	bob.write(`{"op":"receive","id":"r1","subject":"chat.messages","max":3}`)
	bob.write(`{"op":"replay","id":"p1","subject":"chat.messages","max":3}`)
	bob.write(`{"op":"request","id":"q1","message":{"type":"chat","subject":"chat.ask","intent":"chat","data":{"n":1}}}`)
	require.Eventually(t, func() bool { return v.srv.Stats().QueuedBytes >= before+7*64<<10 }, 30*time.Second, 10*time.Millisecond,
		"the three answers wait in the write queue")

	p, err := v.e.Authenticate(ctx, "bob-token")
	require.NoError(t, err)
	require.NoError(t, v.e.RevokeContract(ctx, p, info.ID))

	// Bob reads everything now: each call is answered with the
	// revocation, not with messages.
	answers := map[string]*ws.Frame{}
	for len(answers) < 3 {
		f := bob.next()
		if f.Re != "" {
			answers[f.Re] = f
		}
	}
	for _, id := range []string{"r1", "p1", "q1"} {
		f := answers[id]
		require.Equal(t, ws.OpError, f.Op, "%s was answered %s after the revocation", id, f.Op)
		require.Equal(t, pigeon.CodeContractRevoked, f.Error.Code, "%s", id)
	}
	require.GreaterOrEqual(t, v.srv.Stats().CutFrames, int64(3))
	require.Eventually(t, func() bool { return v.srv.Stats().QueuedBytes == 0 }, 30*time.Second, 10*time.Millisecond,
		"the cut frames gave their bytes back")
}
