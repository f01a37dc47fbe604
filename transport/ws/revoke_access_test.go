package ws_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// TestGrantRevocationCutsTheWriteQueue: a subscriber on a grant token
// reads slowly, so that its write queue is full and the next delivery
// waits for room, holding the engine's subscription in its handler. The
// grant is revoked (the answer to a leaked token). The engine learns it at
// the subscription's next look at the contract, which waits behind that
// delivery; the delivery, once there is room, reads its data again
// through the contract and is refused, and with it every deliver frame
// still queued is cut: the client is written what the network already
// held, and then the unsubscribed push with GRANT_REVOKED. Before, the
// refusal ended the subscription as if the client had unsubscribed: the
// whole queue was written after the revocation, and no push said why.
func TestGrantRevocationCutsTheWriteQueue(t *testing.T) {
	for _, tc := range []struct {
		name, opts string
	}{
		{"at most once", `,"ack":"none"`},
		{"acknowledged", `,"window":10000`},
		{"acknowledged, batched", `,"window":10000,"batch":true`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newEnv(t, &ws.Options{WriteQueue: 4096, WriteQueueBytes: 32 << 20, PublishRate: -1})
			ctx := context.Background()
			_, err := v.e.PutRole(ctx, pigeon.Role{Name: "chat-reader", Permissions: []pigeon.Permission{
				{Subject: "chat.messages", Operations: []pigeon.Operation{pigeon.OpReceive}}}})
			require.NoError(t, err)
			_, err = v.e.CreateAccount(ctx, pigeon.Account{ID: "ws-reader", Roles: []string{"chat-reader"}})
			require.NoError(t, err)
			g, err := v.e.IssueGrant(ctx, "ws-reader", []string{"chat-reader"}, time.Hour)
			require.NoError(t, err)

			bob := v.raw(t, g.Token)
			bob.negotiate("chat.messages")
			bob.ok(ws.OpSubscribe, `,"subject":"chat.messages"`+tc.opts, ws.OpSubscribed)
			alice, err := v.e.Connect(ctx, "alice-token", []string{"chat.messages"})
			require.NoError(t, err)
			defer alice.Close(ctx)

			// Bob reads nothing while 800 messages of 64 KiB (50 MiB) are
			// published: the write queue fills (32 MiB) and a delivery
			// waits for room.
			const n = 800
			text := strings.Repeat("x", 64<<10)
			for i := range n {
				_, err := alice.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat",
					Data: json.RawMessage(`{"kind":"chat","room":"lobby","n":` + strconv.Itoa(i) + `,"text":"` + text + `"}`)})
				require.NoError(t, err)
			}
			require.Eventually(t, func() bool { return v.srv.Stats().QueuedBytes > 24<<20 }, 30*time.Second, 10*time.Millisecond,
				"deliveries wait in the write queue")

			require.NoError(t, v.e.RevokeGrant(ctx, g.JTI))

			// Bob reads everything now.
			got, end := 0, (*ws.Frame)(nil)
			for end == nil {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				typ, b, err := bob.c.Read(rctx)
				cancel()
				if err != nil {
					break // before: no push ended the subscription
				}
				require.Equal(t, websocket.MessageText, typ)
				f, err := ws.DecodeFrame(b)
				require.NoError(t, err)
				switch f.Op {
				case ws.OpDeliver:
					got++
				case ws.OpDeliverBatch:
					got += len(f.Deliveries)
				case ws.OpUnsubscribed:
					end = f
				default:
					t.Fatalf("unexpected frame %s", b)
				}
			}
			require.Less(t, got, n/4, "the queued deliveries were written after the grant was revoked: %d of %d", got, n)
			require.NotNil(t, end, "an unsubscribed push ends the subscription (%d deliveries read)", got)
			require.NotNil(t, end.Error)
			require.Equal(t, pigeon.CodeGrantRevoked, end.Error.Code)
			require.Positive(t, v.srv.Stats().CutFrames)
			require.Eventually(t, func() bool { return v.srv.Stats().QueuedBytes == 0 }, 30*time.Second, 10*time.Millisecond,
				"the cut frames gave their bytes back")
		})
	}
}
