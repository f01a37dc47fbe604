package pigeon_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// TestAbandonedRequestsDoNotPinLargeReplies: a requester that gives up on
// its requests, over and over, to a service whose replies are large does
// not make the broker keep every reply for a later claim: past the bound
// of one requester they are not kept (each noted), while the replies
// kept are still claimed by a retry of their request.
func TestAbandonedRequestsDoNotPinLargeReplies(t *testing.T) {
	rec := newRecorder()
	f := newFixture(t, func(o *pigeon.Options) { o.Observer = rec })
	checkout := f.connect("checkout-token", "payments.authorize")
	gateway := f.connect("gateway-token", "payments.authorize")
	large := json.RawMessage(`{"approved":true,"note":"` + strings.Repeat("x", 1400<<10) + `"}`)

	const requests = 14 // each reply is about 1.4 MiB: 16 MiB hold 11
	sent := make([]*pigeon.Message, requests)
	for i := range sent {
		sent[i] = demo.Payment("o-abandoned-" + strconv.Itoa(i))
		// Long enough for the request to be published on a loaded machine
		// (a deadline that passes first refuses the publish itself); no
		// reply comes before the loop ends, so each times out all the same.
		short, cancel := contextWithTimeout(50 * time.Millisecond)
		_, err := checkout.Request(short, sent[i])
		cancel()
		requireCode(t, err, pigeon.CodeRequestTimeout)
	}
	got, err := gateway.Receive(ctx, "payments.authorize", requests)
	require.NoError(t, err)
	require.Len(t, got, requests)
	for _, req := range got {
		_, err := gateway.Publish(ctx, &pigeon.Message{Type: "payment.authorization.result", Subject: "payments.authorize",
			Intent: "authorize_payment", CorrelationID: req.ID, Classification: "pci", Data: large})
		require.NoError(t, err, "the replier is answered accepted whether or not the reply is kept")
	}
	var notKept int
	rec.snapshot(func(r *recorder) bool {
		notKept = len(r.notes[pigeon.NoteReplyNotKept])
		for _, l := range r.notes[pigeon.NoteReplyNotKept] {
			require.Equal(t, "payments.authorize", l)
		}
		return true
	})
	require.Equal(t, 3, notKept, "11 of 14 replies fit one requester's 16 MiB")

	// A retry of the first request (its idempotency key) claims its reply.
	reply, err := checkout.Request(ctx, sent[0])
	require.NoError(t, err)
	require.JSONEq(t, string(large), string(reply.Data))
}
