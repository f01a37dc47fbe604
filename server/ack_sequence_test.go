package server_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/internal/testclock"
	"pigeon/store/memory"
)

// TestHTTPAckNamesTheSequenceReceived: the body of an ack or a nack may
// name the sequence the message was received at. Once that message is
// trimmed and a newer one published under its id (and received by the
// same consumer), an answer naming the old sequence is ACK_NOT_ALLOWED
// (409) and leaves the newer message leased; one naming the newer
// sequence settles it, and a body without a sequence is taken as before.
func TestHTTPAckNamesTheSequenceReceived(t *testing.T) {
	cases := []struct {
		op, body string
	}{
		{"ack", `{"messageId":"note-1","sequence":1}`},
		{"nack", `{"messageId":"note-1","sequence":1,"delayMs":0}`},
	}
	for _, c := range cases {
		t.Run(c.op, func(t *testing.T) {
			f, st := clockServer(t)
			pub := f.contract(t, "orders-token", "notifications.send")
			sub := f.contract(t, "notifier-token", "notifications.send")
			publish := func(id string, seq int) {
				m := demo.Notification("key-" + strconv.Itoa(seq))
				m.ID = id
				r := f.do(t, http.MethodPost, "/v1/messages", "orders-token", msgBody(t, m), "x-pigeon-contract", pub)
				require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
				require.EqualValues(t, seq, r.json(t)["message"].(map[string]any)["sequence"])
			}
			receive := func() []float64 {
				r := f.do(t, http.MethodPost, "/v1/subjects/notifications.send/receive", "notifier-token", `{"max":5,"ack":"explicit"}`, "x-pigeon-contract", sub)
				require.Equal(t, http.StatusOK, r.status, "%s", r.body)
				var seqs []float64
				for _, m := range r.json(t)["messages"].([]any) {
					seqs = append(seqs, m.(map[string]any)["sequence"].(float64))
				}
				return seqs
			}
			settle := func(op, body string) response {
				return f.do(t, http.MethodPost, "/v1/subjects/notifications.send/"+op, "notifier-token", body, "x-pigeon-contract", sub)
			}

			publish("note-1", 1)
			require.Equal(t, []float64{1}, receive())
			n, err := st.TrimThrough(context.Background(), "notifications.send", 1)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			publish("note-1", 2) // the id is free again
			require.Equal(t, []float64{2}, receive())

			r := settle(c.op, c.body)
			require.Equal(t, http.StatusForbidden, r.status, "%s", r.body)
			require.Equal(t, pigeon.CodeAckNotAllowed, r.code(t))
			require.Empty(t, receive(), "sequence 2 is still leased to the notifier")
			r = settle("nack", `{"messageId":"note-1","sequence":2,"delayMs":0}`)
			require.Equal(t, http.StatusOK, r.status, "%s", r.body)
			require.Equal(t, []float64{2}, receive(), "the late answer settled nothing")
			r = settle("ack", `{"messageId":"note-1"}`)
			require.Equal(t, http.StatusOK, r.status, "a body without a sequence acks the message holding the id: %s", r.body)
			require.Empty(t, receive())
		})
	}
}

// clockServer serves an engine of the test catalog in region uk, on the
// memory store it returns and a test clock (f.clock), over a real server.
func clockServer(t *testing.T) (*fixture, *memory.Store) {
	t.Helper()
	st := memory.New(nil)
	t.Cleanup(func() { require.NoError(t, st.Close(context.Background())) })
	clk := testclock.New(time.Now())
	e, err := pigeon.New(context.Background(), &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
		Catalog:       testCatalog(),
		Region:        "uk",
		Now:           clk.Now,
		Store:         st,
	})
	require.NoError(t, err)
	s, hs := serve(t, e, nil)
	return &fixture{e: e, s: s, hs: hs, clock: clk}, st
}
