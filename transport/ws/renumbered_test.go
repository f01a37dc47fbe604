package ws_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
	"pigeon/transport/ws"
)

// TestReconnectToARenumberedSubject is the shared scenario
// "reconnect.renumbered" (clients/conformance/scenarios.json), in process:
// a subscription that resumes (Reconnect) on a broker that lost its store
// gets the messages of the new numbering from its first, instead of
// waiting, silently, until it reaches the old position; and it forgets the
// old position, so that the next resume starts after what it handled of
// the new numbering rather than from its first again.
func TestReconnectToARenumberedSubject(t *testing.T) {
	scenario(t, "reconnect.renumbered")
	ctx := context.Background()
	type broker struct {
		e   *pigeon.Engine
		srv *ws.Server
	}
	start := func() broker {
		opts := transporttest.Options()
		opts.Store = memory.New(nil)
		e, err := pigeon.New(ctx, opts)
		require.NoError(t, err)
		return broker{e, ws.NewServer(e, nil)}
	}
	stop := func(b broker) {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, b.srv.Shutdown(sctx))
		require.NoError(t, b.e.Shutdown(sctx))
	}
	var cur atomic.Pointer[broker]
	first := start()
	cur.Store(&first)
	defer func() { stop(*cur.Load()) }()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { cur.Load().srv.ServeHTTP(w, r) }))
	defer hs.Close()
	url := "ws" + strings.TrimPrefix(hs.URL, "http")
	publish := func(texts ...string) {
		alice, err := cur.Load().e.Connect(ctx, "alice-token", []string{"chat.messages"})
		require.NoError(t, err)
		defer alice.Close(ctx)
		for _, text := range texts {
			_, err := alice.Publish(ctx, chatMsg(text))
			require.NoError(t, err)
		}
	}
	acksAnswered := func(what string) {
		eventually(t, func() bool { return cur.Load().srv.PendingDeliveries() == 0 }, "the acks of %s answered", what)
	}

	bob, err := ws.Dial(ctx, url, "bob-token", []string{"chat.messages"})
	require.NoError(t, err)
	defer bob.Close(ctx)
	var got texts
	sub, err := bob.Subscribe(ctx, "chat.messages", got.handler)
	require.NoError(t, err)
	publish("a-1", "a-2", "a-3", "a-4", "a-5")
	eventually(t, func() bool { return len(got.list()) == 5 }, "the first broker's messages: %v", got.list())
	acksAnswered("a-1 to a-5")

	// The broker comes back without its store: its numbering starts anew.
	second := start()
	cur.Store(&second)
	stop(first)
	<-bob.Done()
	require.NoError(t, bob.Reconnect(ctx)) // asks for 6, beyond the end
	require.Equal(t, uint64(1), sub.(interface{ From() uint64 }).From(), "the resume starts at the first message")
	publish("b-1", "b-2")
	eventually(t, func() bool { return len(got.list()) == 7 }, "the new numbering's messages: %v", got.list())
	require.Equal(t, []string{"b-1", "b-2"}, got.list()[5:])
	acksAnswered("b-1 and b-2")

	// Only bob's connection is cut: the engine and its store stay, and
	// the resume continues in the new numbering.
	require.NoError(t, second.srv.Shutdown(ctx))
	<-bob.Done()
	again := broker{second.e, ws.NewServer(second.e, nil)}
	cur.Store(&again)
	require.NoError(t, bob.Reconnect(ctx))
	publish("b-3")
	eventually(t, func() bool { return len(got.list()) >= 8 }, "the next message: %v", got.list())
	time.Sleep(100 * time.Millisecond) // nothing more comes
	require.Equal(t, []string{"b-3"}, got.list()[7:])
	require.NoError(t, sub.Unsubscribe(ctx))
}
