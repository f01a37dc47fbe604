package server_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// TestHTTPLatePullAnswerNamesItsAttempt: an explicit receive answers each
// leased message's attempt ("attempts", in step with "messages"). Two
// workers of one principal, each under its own contract: A receives the
// job (attempt 1) and stalls past the ack wait; B receives it again
// (attempt 2). A's ack or nack naming attempt 1 is ACK_NOT_ALLOWED (403)
// and leaves B's lease alone; B's nack naming attempt 2 hands the job out
// again (attempt 3), whose ack settles it. A body naming no attempt keeps
// the principal-wide meaning: it settles B's lease.
func TestHTTPLatePullAnswerNamesItsAttempt(t *testing.T) {
	cases := []struct {
		op, late string
	}{
		{"ack", `{"messageId":"note-9","sequence":1,"attempt":1}`},
		{"nack", `{"messageId":"note-9","sequence":1,"attempt":1,"delayMs":0}`},
		{"ack", `{"messageId":"note-9","attempt":1}`},
	}
	for _, c := range cases {
		t.Run(c.op+c.late, func(t *testing.T) {
			f, workerA, workerB := attemptFixture(t)
			got := f.receiveAttempts(t, workerA)
			require.Equal(t, []float64{1}, got)
			f.clock.Advance(pigeon.DefaultAckWait + time.Second) // A's lease lapses
			require.Equal(t, []float64{2}, f.receiveAttempts(t, workerB))

			r := f.settle(t, c.op, c.late, workerA)
			require.Equal(t, http.StatusForbidden, r.status, "%s", r.body)
			require.Equal(t, pigeon.CodeAckNotAllowed, r.code(t))
			require.Empty(t, f.receiveAttempts(t, workerA), "B's lease still holds the job")

			r = f.settle(t, "nack", `{"messageId":"note-9","sequence":1,"attempt":2,"delayMs":0}`, workerB)
			require.Equal(t, http.StatusOK, r.status, "B's lease was left alone: %s", r.body)
			require.Equal(t, []float64{3}, f.receiveAttempts(t, workerA))
			r = f.settle(t, "ack", `{"messageId":"note-9","sequence":1,"attempt":3}`, workerA)
			require.Equal(t, http.StatusOK, r.status, "%s", r.body)
			f.clock.Advance(pigeon.DefaultAckWait + time.Second)
			require.Empty(t, f.receiveAttempts(t, workerB), "the ack settled the job")
		})
	}
	t.Run("WithoutAttempt", func(t *testing.T) {
		f, workerA, workerB := attemptFixture(t)
		require.Equal(t, []float64{1}, f.receiveAttempts(t, workerA))
		f.clock.Advance(pigeon.DefaultAckWait + time.Second)
		require.Equal(t, []float64{2}, f.receiveAttempts(t, workerB))
		r := f.settle(t, "ack", `{"messageId":"note-9","sequence":1}`, workerA)
		require.Equal(t, http.StatusOK, r.status, "an answer naming no attempt is principal-wide: %s", r.body)
		f.clock.Advance(pigeon.DefaultAckWait + time.Second)
		require.Empty(t, f.receiveAttempts(t, workerB), "it settled B's lease")
	})
	t.Run("Negative", func(t *testing.T) {
		f, workerA, _ := attemptFixture(t)
		require.Equal(t, []float64{1}, f.receiveAttempts(t, workerA))
		r := f.settle(t, "ack", `{"messageId":"note-9","attempt":-1}`, workerA)
		require.Equal(t, pigeon.CodeInvalidArgument, r.code(t), "%s", r.body)
	})
}

// attemptFixture serves a broker on a test clock with one notification
// published, and returns two contracts of the notifier (two workers).
func attemptFixture(t *testing.T) (*attemptFix, string, string) {
	base, _ := clockServer(t)
	f := &attemptFix{*base}
	pub := f.contract(t, "orders-token", "notifications.send")
	m := demo.Notification("key-9")
	m.ID = "note-9"
	r := f.do(t, http.MethodPost, "/v1/messages", "orders-token", msgBody(t, m), "x-pigeon-contract", pub)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	return f, f.contract(t, "notifier-token", "notifications.send"), f.contract(t, "notifier-token", "notifications.send")
}

type attemptFix struct{ fixture }

// receiveAttempts receives explicitly under contract k and returns the
// attempts answered, checking they are in step with the messages.
func (f *attemptFix) receiveAttempts(t *testing.T, k string) []float64 {
	t.Helper()
	r := f.do(t, http.MethodPost, "/v1/subjects/notifications.send/receive", "notifier-token", `{"max":5,"ack":"explicit"}`, "x-pigeon-contract", k)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	body := r.json(t)
	msgs := body["messages"].([]any)
	if len(msgs) == 0 {
		require.NotContains(t, body, "attempts")
		return nil
	}
	var attempts []float64
	for _, n := range body["attempts"].([]any) {
		attempts = append(attempts, n.(float64))
	}
	require.Len(t, attempts, len(msgs))
	return attempts
}

func (f *attemptFix) settle(t *testing.T, op, body, k string) response {
	t.Helper()
	return f.do(t, http.MethodPost, "/v1/subjects/notifications.send/"+op, "notifier-token", body, "x-pigeon-contract", k)
}
