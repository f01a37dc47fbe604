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

// TestRevocationCutsTheWriteQueue: a subscriber that reads slowly has
// deliver frames waiting in its connection's write queue (up to its write
// budget, for as long as it takes to read them). When its contract is
// revoked, none of those is written any more: what it reads after the
// revocation is what the network already held, then the unsubscribed
// push with CONTRACT_REVOKED. Before, the whole queue went out after the
// revocation, every frame of it.
func TestRevocationCutsTheWriteQueue(t *testing.T) {
	for _, tc := range []struct {
		name, opts string
	}{
		{"at most once", `,"ack":"none"`},
		{"acknowledged, batched", `,"window":10000,"batch":true`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newEnv(t, &ws.Options{WriteQueue: 4096, WriteQueueBytes: 512 << 20, ServerQueueBytes: 1 << 30, PublishRate: -1})
			ctx := context.Background()
			bob := v.raw(t, "bob-token")
			info := bob.negotiate("chat.messages")
			bob.ok(ws.OpSubscribe, `,"subject":"chat.messages"`+tc.opts, ws.OpSubscribed)
			alice, err := v.e.Connect(ctx, "alice-token", []string{"chat.messages"})
			require.NoError(t, err)
			defer alice.Close(ctx)

			// Bob reads nothing while 400 messages of 64 KiB (25 MiB) are
			// published: far more than the network holds, so most wait
			// in the write queue.
			const n = 400
			text := strings.Repeat("x", 64<<10)
			for i := range n {
				_, err := alice.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat",
					Data: json.RawMessage(`{"kind":"chat","room":"lobby","n":` + strconv.Itoa(i) + `,"text":"` + text + `"}`)})
				require.NoError(t, err)
			}
			require.Eventually(t, func() bool { return v.srv.Stats().QueuedBytes > 8<<20 }, 30*time.Second, 10*time.Millisecond,
				"deliveries wait in the write queue")

			p, err := v.e.Authenticate(ctx, "bob-token")
			require.NoError(t, err)
			require.NoError(t, v.e.RevokeContract(ctx, p, info.ID))

			// Bob reads everything now: the deliveries the network held,
			// then the end of the subscription, and nothing more.
			got := 0
			for {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				typ, b, err := bob.c.Read(rctx)
				cancel()
				require.NoError(t, err)
				require.Equal(t, websocket.MessageText, typ)
				f, err := ws.DecodeFrame(b)
				require.NoError(t, err)
				if f.Op == ws.OpUnsubscribed {
					require.NotNil(t, f.Error)
					require.Equal(t, pigeon.CodeContractRevoked, f.Error.Code)
					break
				}
				switch f.Op {
				case ws.OpDeliver:
					got++
				case ws.OpDeliverBatch:
					got += len(f.Deliveries)
				default:
					t.Fatalf("unexpected frame %s", f.Op)
				}
			}
			require.Less(t, got, n/2, "the queued deliveries were written after the revocation: %d of %d", got, n)
			require.Positive(t, v.srv.Stats().CutFrames)
			require.Eventually(t, func() bool { return v.srv.Stats().QueuedBytes == 0 }, 30*time.Second, 10*time.Millisecond,
				"the cut frames gave their bytes back")
		})
	}
}

// TestRevocationEndsAWaitingSubscription: a subscription whose window is
// full (the client holds a delivery unanswered) ends the moment its
// contract is revoked, not when an answer or the ack wait frees the window.
func TestRevocationEndsAWaitingSubscription(t *testing.T) {
	v := newEnv(t, nil)
	ctx := context.Background()
	bob := v.raw(t, "bob-token")
	info := bob.negotiate("chat.messages")
	bob.ok(ws.OpSubscribe, `,"subject":"chat.messages","window":1`, ws.OpSubscribed)
	alice, err := v.e.Connect(ctx, "alice-token", []string{"chat.messages"})
	require.NoError(t, err)
	defer alice.Close(ctx)
	for i := range 3 {
		_, err := alice.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat",
			Data: json.RawMessage(`{"kind":"chat","room":"lobby","n":` + strconv.Itoa(i) + `}`)})
		require.NoError(t, err)
	}
	require.Equal(t, ws.OpDeliver, bob.push().Op, "the first delivery, left unanswered")

	p, err := v.e.Authenticate(ctx, "bob-token")
	require.NoError(t, err)
	require.NoError(t, v.e.RevokeContract(ctx, p, info.ID))
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second) // the ack wait is 30 s
	defer cancel()
	_, b, err := bob.c.Read(rctx)
	require.NoError(t, err, "no frame within 10 s of the revocation")
	f, err := ws.DecodeFrame(b)
	require.NoError(t, err)
	require.Equal(t, ws.OpUnsubscribed, f.Op, "the next frame ends the subscription: %s", b)
	require.Equal(t, pigeon.CodeContractRevoked, f.Error.Code)
}
