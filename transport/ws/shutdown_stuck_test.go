package ws_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/transport/ws"
)

// TestShutdownReturnsByItsDeadline: Shutdown returns ctx.Err() once ctx
// ends, having aborted the connections left, even when one of them cannot
// finish its teardown (here its read loop is held in the middle of a
// frame, as an application's code that never returns would hold it); a
// later call, idempotent, does the same with its own ctx, and returns nil
// once the connection is released and torn down. Before, Shutdown waited
// for that teardown without limit after its ctx ended, and the process
// shutting down hung with it.
func TestShutdownReturnsByItsDeadline(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	v := newEnv(t, ws.WithReadHook(nil, func(f *ws.Frame) {
		if f.ID == "stuck" {
			close(entered)
			<-release
		}
	}))
	released := false
	free := func() {
		if !released {
			released = true
			close(release)
		}
	}
	t.Cleanup(free) // before the env's own cleanup, which shuts down again

	c := v.raw(t, "alice-token")
	c.negotiate("chat.messages")
	c.write(`{"op":"unsubscribe","id":"stuck","sub":"s1"}`)
	<-entered

	shutdown := func(ctx context.Context) <-chan error {
		done := make(chan error, 1)
		go func() { done <- v.srv.Shutdown(ctx) }()
		return done
	}
	wait := func(done <-chan error) error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("Shutdown did not return after its ctx ended")
			return nil
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := shutdown(ctx)
	cancel()
	require.ErrorIs(t, wait(done), context.Canceled)

	// Idempotent: a second call, its ctx ended, returns so too.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, wait(shutdown(ctx)), context.Canceled)

	// Released, the connection is torn down and Shutdown returns nil.
	free()
	require.NoError(t, wait(shutdown(context.Background())))
	eventually(t, func() bool { return v.srv.Stats().Open == 0 }, "%d open", v.srv.Stats().Open)
}
