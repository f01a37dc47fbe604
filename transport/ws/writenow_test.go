package ws_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// A call or a synchronous publish that finds the connection's writer idle
// writes its frame itself, but never before a frame queued earlier: with
// the writer held mid-burst, a receive queues; the ack sent once the
// writer is free (and before it has woken) reaches the server after it,
// and a synchronous publish after an asynchronous one still queued does
// too. Both sessions' calls are answered as before.
func TestWriteNowKeepsFrameOrder(t *testing.T) {
	ss := newSilentServer(t)
	s, err := ws.Dial(context.Background(), ss.url, "alice-token", []string{"chat.messages"})
	require.NoError(t, err)
	defer s.Close(context.Background())
	short := func() context.Context {
		c, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		t.Cleanup(cancel)
		return c
	}
	next := func() string {
		select {
		case op := <-ss.got:
			return op
		case <-time.After(10 * time.Second):
			t.Fatal("no frame reached the server")
			return ""
		}
	}

	for round := range 20 {
		release := ws.HoldWriter(s)
		first := make(chan error, 1)
		go func() {
			_, err := s.Receive(short(), "chat.messages", 1) // queued: the writer is busy
			first <- err
		}()
		require.Eventually(t, func() bool { return ws.QueuedFrames(s) == 1 }, 10*time.Second, time.Millisecond)
		release()
		requireCodeOf(t, s.Ack(short(), "chat.messages", "m-1"), pigeon.CodeRequestTimeout) // no answer comes
		requireCodeOf(t, <-first, pigeon.CodeRequestTimeout)
		require.Equal(t, ws.OpReceive, next(), "round %d", round)
		require.Equal(t, ws.OpAck, next(), "round %d", round)
	}

	m := &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat"}
	release := ws.HoldWriter(s)
	_, err = s.PublishAsync(context.Background(), m)
	require.NoError(t, err)
	release()
	_, err = s.Publish(short(), m) // joins the queued publish, or follows it
	requireCodeOf(t, err, pigeon.CodeRequestTimeout)
	op := next()
	if op == ws.OpPublish {
		require.Equal(t, ws.OpPublish, next())
	} else {
		require.Equal(t, ws.OpPublishBatch, op)
	}
}

func requireCodeOf(t *testing.T, err error, code pigeon.Code) {
	t.Helper()
	require.Equal(t, code, pigeon.ErrorCode(err), "%v", err)
}
