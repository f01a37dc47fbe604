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
	f, program := checkoutGrantFixture(t)
	checkout := f.connect("checkout-token", "payments.authorize")
	gateway := f.connect("gateway-token", "payments.authorize")

	var err error
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

// checkoutGrantFixture is the demo with an account for checkout and a
// session of a grant token of it (role payer: publish on
// payments.authorize).
func checkoutGrantFixture(t *testing.T) (*fixture, pigeon.Session) {
	t.Helper()
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
	t.Cleanup(func() { _ = program.Close(ctx) })
	return f, program
}

// A publish that repeats another credential's message of the same account
// (idempotency keys are scoped by principal) is answered duplicate with
// the original's id and sequence, not its data or envelope: a grant token
// that may publish on a subject, but not receive from it, does not read
// the account's messages by guessing their keys. The credential that sent
// it, on a new session and contract, still gets the original whole.
func TestDuplicateWholeOnlyToItsCredential(t *testing.T) {
	f, program := checkoutGrantFixture(t)
	sent, err := f.connect("checkout-token", "payments.authorize").Publish(ctx, demo.Payment("o-dup"))
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusAccepted, sent.Status)

	res, err := program.Publish(ctx, demo.Payment("o-dup"))
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusDuplicate, res.Status)
	require.Equal(t, sent.Message.ID, res.Message.ID)
	require.Equal(t, sent.Message.Sequence, res.Message.Sequence)
	require.Empty(t, res.Message.Data)
	require.Empty(t, res.Message.Type)
	require.Empty(t, res.Message.Classification)

	again, err := f.connect("checkout-token", "payments.authorize").Publish(ctx, demo.Payment("o-dup"))
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusDuplicate, again.Status)
	require.Equal(t, sent.Message.ID, again.Message.ID)
	require.JSONEq(t, string(demo.Payment("o-dup").Data), string(again.Message.Data))
	require.Equal(t, "payment.authorization.requested", again.Message.Type)
}
