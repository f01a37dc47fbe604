package ws_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testlog"
	"pigeon/store"
	"pigeon/store/memory"
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

// panickyStore panics when asked to append a message whose body holds
// "explode", as a store (or anything an op calls) with a bug might.
type panickyStore struct{ store.Store }

func (s panickyStore) Append(ctx context.Context, m store.Message) (store.Message, bool, error) {
	if strings.Contains(string(m.Body), "explode") {
		panic("explode 4111111111111111")
	}
	return s.Store.Append(ctx, m)
}

// TestOpPanicClosesOnlyItsConnection: an op that panics beyond the gates
// (here in the store) is answered INTERNAL, logged with the panic (a card
// number in it redacted), and its connection closed, as net/http closes
// the connection of a handler that panicked; the broker and its other
// connections go on. Before, the panic on the op's worker goroutine ended
// the process.
func TestOpPanicClosesOnlyItsConnection(t *testing.T) {
	logs := &testlog.Buffer{}
	v := newEnv(t, &ws.Options{Logger: logs.Logger()}, func(o *pigeon.Options) {
		o.Store = panickyStore{memory.New(nil)}
	})
	ctx := context.Background()
	other, err := ws.Dial(ctx, v.url, "bob-token", []string{"chat.messages"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close(ctx) })
	s, err := ws.Dial(ctx, v.url, "alice-token", []string{"chat.messages"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(ctx) })

	var perr error
	require.NotPanics(t, func() { _, perr = s.Publish(ctx, chatMsg("explode")) })
	require.Equal(t, pigeon.CodeInternal, pigeon.ErrorCode(perr), "%v", perr)
	require.Contains(t, logs.String(), "a websocket op panicked")
	require.NotContains(t, logs.String(), "4111111111111111")

	res, err := other.Publish(ctx, chatMsg("the broker goes on"))
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusAccepted, res.Status)
	again, err := ws.Dial(ctx, v.url, "alice-token", []string{"chat.messages"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = again.Close(ctx) })
	_, err = again.Publish(ctx, chatMsg("and takes new connections"))
	require.NoError(t, err)
}
