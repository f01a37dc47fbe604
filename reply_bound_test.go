package pigeon_test

import (
	"context"
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

// A parked reply, and the reply a request still waits for, go only to the
// credential that sent the request: a grant token of the same account
// that knows the request's idempotency key (or its id) and may publish on
// the subject neither claims the parked reply nor waits for the coming
// one; the requester's own credential, on a new session, still does.
// Before, both were bound to the principal id alone.
func TestRepliesBoundToTheRequestingCredential(t *testing.T) {
	f := newFixture(t)
	e := f.e
	_, err := e.PutRole(ctx, pigeon.Role{Name: "payer", Permissions: []pigeon.Permission{{Subject: "payments.authorize", Operations: []pigeon.Operation{pigeon.OpPublish}}}})
	require.NoError(t, err)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: demo.Checkout, Roles: []string{"payer"}})
	require.NoError(t, err)
	g, err := e.IssueGrant(ctx, demo.Checkout, []string{"payer"}, time.Hour)
	require.NoError(t, err)
	program, err := e.Connect(ctx, g.Token, []string{"payments.authorize"})
	require.NoError(t, err)
	defer program.Close(ctx)
	checkout := f.connect("checkout-token", "payments.authorize")
	gateway := f.connect("gateway-token", "payments.authorize")

	abandon := func(m *pigeon.Message) {
		t.Helper()
		short, cancel := contextWithTimeout(50 * time.Millisecond)
		defer cancel()
		_, err := checkout.Request(short, m)
		requireCode(t, err, pigeon.CodeRequestTimeout)
	}
	bounded := func() context.Context {
		c, cancel := contextWithTimeout(2 * time.Second)
		t.Cleanup(cancel)
		return c
	}

	// The reply is parked: the grant's retry by idempotency key and by id
	// is refused, and leaves it for the requester.
	parked := demo.Payment("o-parked")
	abandon(parked)
	req := receiveOne(t, gateway, "payments.authorize")
	_, err = gateway.Publish(ctx, demo.Approval(req.ID))
	require.NoError(t, err)
	_, err = program.Request(bounded(), demo.Payment("o-parked"))
	requireCode(t, err, pigeon.CodeContractPrincipalMismatch)
	byID := demo.Payment("o-parked")
	byID.ID = req.ID
	_, err = program.Request(bounded(), byID)
	requireCode(t, err, pigeon.CodeContractPrincipalMismatch)

	again := f.connect("checkout-token", "payments.authorize")
	reply, err := again.Request(bounded(), demo.Payment("o-parked"))
	require.NoError(t, err, "the requester's own credential claims its reply")
	require.JSONEq(t, `{"approved":true}`, string(reply.Data))

	// The reply has not come yet: the grant may not wait for it.
	coming := demo.Payment("o-coming")
	abandon(coming)
	req = receiveOne(t, gateway, "payments.authorize")
	byID = demo.Payment("o-coming")
	byID.ID = req.ID
	_, err = program.Request(bounded(), byID)
	requireCode(t, err, pigeon.CodeContractPrincipalMismatch)
	_, err = gateway.Publish(ctx, demo.Approval(req.ID))
	require.NoError(t, err)
	reply, err = again.Request(bounded(), demo.Payment("o-coming"))
	require.NoError(t, err)
	require.JSONEq(t, `{"approved":true}`, string(reply.Data))
}
