package ws_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// closingServer answers the negotiate and every frame "ok", then closes
// the connection with 1008 and reason at the first receive, leaving that
// call unanswered.
func closingServer(t *testing.T, reason string) string {
	return newScriptedServer(t, func(f *ws.Frame) []string {
		if f.Op == ws.OpReceive {
			return []string{closePolicy(reason)}
		}
		return []string{okFrame(f)}
	}).url
}

// The server closes a connection whose credential it refuses when it
// checks it again (Server.Reauthenticate) with 1008 and the refusal's code
// as the reason. The call waiting then, Err, and every later call fail
// with that code (UNAUTHENTICATED: errors.Is ErrUnauthenticated), not
// SESSION_CLOSED with the code only in the message: a caller tells a
// credential to replace from a connection to redial. A 1008 whose reason
// is not one of the stable codes (a stalled write, a code in another case)
// is SESSION_CLOSED as before.
func TestClientCloseWithACodeFailsCallsWithIt(t *testing.T) {
	for _, c := range []struct {
		reason string
		want   pigeon.Code
	}{
		{"UNAUTHENTICATED", pigeon.CodeUnauthenticated},
		{"GRANT_REVOKED", pigeon.CodeGrantRevoked},
		{"write stalled", pigeon.CodeSessionClosed},
		{"unauthenticated", pigeon.CodeSessionClosed},
		{"NOT_A_CODE", pigeon.CodeSessionClosed},
		{"", pigeon.CodeSessionClosed},
	} {
		t.Run(c.reason, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := ws.Dial(ctx, closingServer(t, c.reason), "token", []string{"chat.messages"})
			require.NoError(t, err)
			defer s.Close(context.Background())
			_, err = s.Receive(ctx, "chat.messages", 1)
			require.Equal(t, c.want, pigeon.ErrorCode(err), "the call waiting: %v", err)
			if c.reason != "" {
				require.Contains(t, err.Error(), c.reason)
			}
			select {
			case <-s.Done():
			case <-ctx.Done():
				t.Fatal("the session did not end")
			}
			require.Equal(t, c.want, pigeon.ErrorCode(s.Err()), "Err: %v", s.Err())
			err = s.Ack(ctx, "chat.messages", "msg_1")
			require.Equal(t, c.want, pigeon.ErrorCode(err), "a later call: %v", err)
			if c.want == pigeon.CodeUnauthenticated {
				require.ErrorIs(t, err, pigeon.ErrUnauthenticated)
			}
			require.NoError(t, ctx.Err(), "no call waited for its deadline")
		})
	}
}
