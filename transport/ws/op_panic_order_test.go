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
	"pigeon/internal/testlog"
	"pigeon/store/memory"
	"pigeon/transport/ws"
)

// TestOpPanicAnswersBeforeItCloses: an op that panics on a connection
// whose write queue holds frames (deliveries its client has not read
// yet) is answered INTERNAL, and the connection closed with 1011 only
// after that answer and the frames queued before it are written, as the
// read loop's panic closes. Before, the close was written at once, ahead
// of the queued frames: the client never got the answer, nor the
// deliveries queued before it.
func TestOpPanicAnswersBeforeItCloses(t *testing.T) {
	logs := &testlog.Buffer{}
	v := newEnv(t, &ws.Options{Logger: logs.Logger(), PingInterval: -1, PublishRate: -1}, func(o *pigeon.Options) {
		o.Store = panickyStore{memory.New(nil)}
	})
	ctx := context.Background()
	bob := v.raw(t, "bob-token")
	bob.negotiate("chat.messages")
	bob.ok(ws.OpSubscribe, `,"subject":"chat.messages","ack":"none"`, ws.OpSubscribed)
	alice, err := v.e.Connect(ctx, "alice-token", []string{"chat.messages"})
	require.NoError(t, err)
	defer alice.Close(ctx)

	// Bob reads nothing while deliveries of 64 KiB fill the network and
	// then queue on the server, up to 1 MiB (well within the write
	// budget, 8 MiB).
	text := strings.Repeat("x", 64<<10)
	published := 0
	for v.srv.Stats().QueuedBytes < 1<<20 {
		require.Less(t, published, 120, "the deliveries never queued")
		_, err := alice.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat",
			Data: json.RawMessage(`{"kind":"chat","room":"lobby","n":` + strconv.Itoa(published) + `,"text":"` + text + `"}`)})
		require.NoError(t, err)
		published++
	}
	// Its publish panics in the store, behind those deliveries.
	bob.write(`{"op":"publish","id":"boom","message":` + msgJSON(t, chatMsg("explode")) + `}`)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "a websocket op panicked") },
		30*time.Second, 5*time.Millisecond, "the op panicked")

	a := bob.answer("boom") // fails if the connection closes first
	require.Equal(t, ws.OpError, a.Op, "answer %+v", a)
	require.Equal(t, pigeon.CodeInternal, a.Error.Code)
	require.NotEmpty(t, bob.pushes, "deliveries queued before the answer were written before it")
	require.Equal(t, websocket.StatusInternalError, bob.closeStatus())
}
