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
	"pigeon/transport/ws"
)

// TestStalledSubscriberIsReleased: an acknowledged subscriber has large
// deliveries fill its write budget, so that the next delivery waits for
// room, and then stops reading. The server closes the connection (1008)
// and lets everything of it go: the connection's slot, the subscription
// (its place among the principal's, its in-flight deliveries), and a
// shutdown does not wait for it. Before, the delivery that was waiting
// for room failed without its done being called: the engine's
// subscription waited for that handler for ever, the connection's
// teardown with it, so a client could leak connections (and their
// MaxConnectionsPerPrincipal slots and subscriptions) one stall at a time,
// and Shutdown hung.
func TestStalledSubscriberIsReleased(t *testing.T) {
	for _, tc := range []struct {
		name, opts string
	}{
		{"acknowledged", `,"window":1000`},
		{"acknowledged, batched", `,"window":1000,"batch":true`},
		{"at most once", `,"ack":"none"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newEnv(t, &ws.Options{StallTimeout: 300 * time.Millisecond, PingInterval: -1, PublishRate: -1})
			ctx := context.Background()
			bob := v.raw(t, "bob-token")
			bob.negotiate("chat.messages")
			bob.ok(ws.OpSubscribe, `,"subject":"chat.messages"`+tc.opts, ws.OpSubscribed)
			alice, err := v.e.Connect(ctx, "alice-token", []string{"chat.messages"})
			require.NoError(t, err)
			defer alice.Close(ctx)

			// 300 messages of 64 KiB (19 MiB): more than the connection's
			// write budget (8 MiB) and what the network holds. Bob reads
			// nothing.
			text := strings.Repeat("x", 64<<10)
			for i := range 300 {
				_, err := alice.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat",
					Data: json.RawMessage(`{"kind":"chat","room":"lobby","n":` + strconv.Itoa(i) + `,"text":"` + text + `"}`)})
				require.NoError(t, err)
			}
			require.Eventually(t, func() bool { return v.srv.Stats().Stalled == 1 }, 30*time.Second, 10*time.Millisecond,
				"the connection stalls")
			_ = bob.c.CloseNow()
			require.Eventually(t, func() bool { return v.srv.Stats().Open == 0 }, 30*time.Second, 10*time.Millisecond,
				"the stalled connection is let go")

			// Bob's subscriptions ended: he may subscribe again as often as
			// the limit allows, and the server shuts down at once.
			again := v.raw(t, "bob-token")
			again.negotiate("chat.messages")
			again.ok(ws.OpSubscribe, `,"subject":"chat.messages"`, ws.OpSubscribed)
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			require.NoError(t, v.srv.Shutdown(sctx), "shutdown waits for nothing left behind")
		})
	}
}
