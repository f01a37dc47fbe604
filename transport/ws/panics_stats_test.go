package ws_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store/memory"
	"pigeon/transport/ws"
)

// TestSurvivedPanicsAreInStats: a panic the server survives, of an op's
// worker (here the store's, under a publish) or of a connection's read
// loop, is counted in Stats.Panics, as well as logged, so that an
// operator can alert on it: the engine's Observer does not see it.
func TestSurvivedPanicsAreInStats(t *testing.T) {
	t.Run("OpWorker", func(t *testing.T) {
		v := newEnv(t, nil, func(o *pigeon.Options) { o.Store = panickyStore{memory.New(nil)} })
		ctx := context.Background()
		s, err := ws.Dial(ctx, v.url, "alice-token", []string{"chat.messages"})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close(ctx) })
		require.Zero(t, v.srv.Stats().Panics)
		_, err = s.Publish(ctx, chatMsg("explode"))
		require.Equal(t, pigeon.CodeInternal, pigeon.ErrorCode(err), "%v", err)
		require.EqualValues(t, 1, v.srv.Stats().Panics)
	})
	t.Run("ReadLoop", func(t *testing.T) {
		v := newEnv(t, ws.WithReadHook(nil, func(f *ws.Frame) {
			if f.ID == "boom" {
				panic("boom")
			}
		}))
		c := v.raw(t, "alice-token")
		c.negotiate("chat.messages")
		require.Zero(t, v.srv.Stats().Panics)
		c.write(`{"op":"unsubscribe","id":"boom","sub":"s-1"}`)
		a := c.answer("boom")
		require.Equal(t, pigeon.CodeInternal, a.Error.Code, "answer %+v", a)
		require.EqualValues(t, 1, v.srv.Stats().Panics)
	})
}
