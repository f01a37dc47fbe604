package ws_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// TestClientRefusesAnswersWithoutMessages: a server that answers a receive
// or a replay with a message that is not one (null) fails the call
// INTERNAL, as a decision, a decisions slot or a reply without a message
// does. Before, the caller got a nil *pigeon.Message among its messages,
// which no in-process session returns, and the first m.ID on it panicked
// the application.
func TestClientRefusesAnswersWithoutMessages(t *testing.T) {
	for _, tc := range []struct {
		name     string
		messages string
	}{
		{"null", `[null]`},
		{"null after a message", `[{"id":"msg_1","type":"chat","subject":"chat.messages","data":{}},null]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newScriptedServer(t, func(f *ws.Frame) []string {
				switch f.Op {
				case ws.OpReceive, ws.OpReplay:
					return []string{`{"op":"messages","re":"` + f.ID + `","messages":` + tc.messages + `}`}
				}
				return nil
			})
			ctx := context.Background()
			s, err := ws.Dial(ctx, srv.url, "t", []string{"chat.messages"})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close(ctx) })

			msgs, err := s.Receive(ctx, "chat.messages", 10)
			require.Equal(t, pigeon.CodeInternal, pigeon.ErrorCode(err), "receive: %v %v", msgs, err)
			msgs, err = s.Replay(ctx, pigeon.ReplayRequest{Subject: "chat.messages"})
			require.Equal(t, pigeon.CodeInternal, pigeon.ErrorCode(err), "replay: %v %v", msgs, err)
		})
	}
}
