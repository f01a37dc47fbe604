package ws_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// TestClientRefusesAnswersWithoutMessages: a server that answers a receive
// or a replay with an entry that is not a message (null) has it left out,
// logged, and the other messages returned, as the TypeScript and Python
// clients do (see TestPullAnswerRefusesABadEntryAlone). Before, the caller
// got a nil *pigeon.Message among its messages, which no in-process
// session returns, and the first m.ID on it panicked the application.
func TestClientRefusesAnswersWithoutMessages(t *testing.T) {
	for _, tc := range []struct {
		name     string
		messages string
		kept     int
	}{
		{"null", `[null]`, 0},
		{"null after a message", `[{"id":"msg_1","type":"chat","subject":"chat.messages","sequence":1,"data":{}},null]`, 1},
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
			require.NoError(t, err)
			require.Len(t, msgs, tc.kept, "receive")
			for _, m := range msgs {
				require.NotNil(t, m)
			}
			msgs, err = s.Replay(ctx, pigeon.ReplayRequest{Subject: "chat.messages"})
			require.NoError(t, err)
			require.Len(t, msgs, tc.kept, "replay")
			for _, m := range msgs {
				require.NotNil(t, m)
			}
		})
	}
}
