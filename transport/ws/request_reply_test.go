package ws_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// replyingServer answers every request with a reply whose correlationId is
// corr(the request's id), recording the request ids it saw.
func replyingServer(t *testing.T, corr func(id string) string, seen chan<- string) string {
	t.Helper()
	return newScriptedServer(t, func(f *ws.Frame) []string {
		if f.Op != ws.OpRequest || f.Message == nil {
			return nil
		}
		seen <- f.Message.ID
		c := corr(f.Message.ID)
		return []string{`{"op":"reply","re":"` + f.ID + `","message":{"specversion":"1.0","id":"msg_reply","type":"t","source":"s","subject":"payments.authorize","time":"2025-01-01T00:00:00Z","data":{},"correlationId":"` + c + `"}}`}
	}).url
}

// A reply must answer the request sent: the Go client draws an id for a
// request without one (no signature, no idempotency key) and refuses a
// reply whose correlationId is missing or names another request, as the
// Rust client does; a keyed request may be a repeat of another id, so
// any correlationId is taken for it.
func TestRequestRefusesAReplyToAnotherRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  pigeon.Message
		corr func(id string) string
		ok   bool
	}{
		{"the request's drawn id", pigeon.Message{}, func(id string) string { return id }, true},
		{"another request's id", pigeon.Message{}, func(string) string { return "msg_other" }, false},
		{"no correlationId", pigeon.Message{}, func(string) string { return "" }, false},
		{"the caller's id", pigeon.Message{ID: "msg_mine"}, func(id string) string { return id }, true},
		{"another than the caller's id", pigeon.Message{ID: "msg_mine"}, func(string) string { return "msg_other" }, false},
		{"a keyed repeat answered for its first id", pigeon.Message{IdempotencyKey: "k-1"}, func(string) string { return "msg_first" }, true},
		{"a keyed request answered with no correlationId", pigeon.Message{IdempotencyKey: "k-1"}, func(string) string { return "" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			seen := make(chan string, 1)
			s, err := ws.Dial(ctx, replyingServer(t, tc.corr, seen), "token", []string{"payments.authorize"})
			require.NoError(t, err)
			defer s.Close(ctx)
			m := tc.msg
			m.Type, m.Subject, m.Intent, m.Data = "payment.authorization.requested", "payments.authorize", "authorize_payment", []byte(`{}`)
			reply, err := s.Request(ctx, &m)
			sent := <-seen
			switch {
			case m.ID != "":
				require.Equal(t, m.ID, sent)
			case m.IdempotencyKey != "":
				require.Empty(t, sent, "a keyed request keeps no id of the client's")
			default:
				require.True(t, strings.HasPrefix(sent, "msg_"), "an id drawn for the request: %q", sent)
				require.Len(t, sent, 24)
				require.Empty(t, m.ID, "the caller's message is not changed")
			}
			if tc.ok {
				require.NoError(t, err)
				require.Equal(t, "msg_reply", reply.ID)
				return
			}
			require.Nil(t, reply)
			require.Equal(t, pigeon.CodeInternal, pigeon.ErrorCode(err), "%v", err)
		})
	}
}

// A message of a receive answer whose attempt is below 1 is never handed
// over with an attempt an ack would send back: it is left out, the other
// returned with its own (see TestPullAnswerRefusesABadEntryAlone).
func TestReceiveAttemptsLeavesOutAttemptsBelowOne(t *testing.T) {
	for _, tc := range []struct {
		attempts string
		kept     string
		attempt  int
	}{
		{"[1,0]", "msg_a", 1},
		{"[-1,1]", "msg_b", 1},
		{"[2,null]", "msg_a", 2},
	} {
		t.Run(tc.attempts, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			url := fakeServer(t, func(id string) []byte {
				return []byte(`{"op":"messages","re":"` + id + `","messages":[{"id":"msg_a","sequence":1},{"id":"msg_b","sequence":2}],"attempts":` + tc.attempts + `}`)
			})
			s, err := ws.Dial(ctx, url, "token", []string{"jobs.run"})
			require.NoError(t, err)
			defer s.Close(ctx)
			msgs, got, err := s.ReceiveAttempts(ctx, "jobs.run", 2)
			require.NoError(t, err)
			require.Len(t, msgs, 1)
			require.Equal(t, tc.kept, msgs[0].ID)
			require.Equal(t, []int{tc.attempt}, got)
		})
	}
}
