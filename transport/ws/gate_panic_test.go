package ws_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// TestGatePanicOverWebSocket: a gate that panics on a message published
// over WebSocket refused it INTERNAL, and the connection and the broker go
// on (a publish, a publish_batch). Before, the panic ended the broker's
// process from the connection's worker goroutine.
func TestGatePanicOverWebSocket(t *testing.T) {
	v := newEnv(t, nil, func(o *pigeon.Options) {
		o.Gates = append(o.Gates, pigeon.GateFunc("panicky", func(_ context.Context, a *pigeon.Admission) pigeon.Verdict {
			if string(a.Message.Data) == `{"text":"boom"}` {
				panic("boom")
			}
			return pigeon.Allow()
		}))
	})
	ctx := context.Background()
	s, err := ws.Dial(ctx, v.url, "alice-token", []string{"chat.messages"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(ctx) })

	boom := func() *pigeon.Message { return chatMsg("boom") }
	_, err = s.Publish(ctx, boom())
	require.Equal(t, pigeon.CodeInternal, pigeon.ErrorCode(err), "%v", err)
	res, err := s.Publish(ctx, chatMsg("still here"))
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusAccepted, res.Status)

	var pending []*ws.PendingPublish
	for _, m := range []*pigeon.Message{chatMsg("a"), boom(), chatMsg("b")} {
		p, err := s.PublishAsync(ctx, m)
		require.NoError(t, err)
		pending = append(pending, p)
	}
	for i, p := range pending {
		_, err := p.Wait(ctx)
		if i == 1 {
			require.Equal(t, pigeon.CodeInternal, pigeon.ErrorCode(err), "%v", err)
		} else {
			require.NoError(t, err)
		}
	}
}
