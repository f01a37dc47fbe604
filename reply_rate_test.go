package pigeon_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// checkoutTwo is a second requester of payments.authorize.
const checkoutTwo = "spiffe://merchant-prod/ns/checkout/sa/checkout-two"

// replyRateFixture is the demo engine with payments.authorize (a
// request/reply subject) limited to one message a second per principal
// (bursts of one; the test clock stands still), and a second requester
// allowed to publish on it.
func replyRateFixture(t *testing.T) *fixture {
	return twoRequesterFixture(t, &pigeon.RateLimitPolicy{PerSecond: 1, Burst: 1})
}

// twoRequesterFixture is the demo engine with a second requester
// (checkoutTwo: publish on payments.authorize, no receive) and the
// subject's rateLimit rate (nil: none), mutated as newFixture's options.
func twoRequesterFixture(t *testing.T, rate *pigeon.RateLimitPolicy, mutate ...func(*pigeon.Options)) *fixture {
	t.Helper()
	cat := demo.Catalog()
	for i := range cat.Subjects {
		s := &cat.Subjects[i]
		if s.Name != "payments.authorize" {
			continue
		}
		s.RateLimit = rate
		rules := s.Policy[pigeon.OpPublish]
		rules[0].Principals = append(rules[0].Principals, checkoutTwo)
	}
	tokens := append(demo.Tokens(), pigeon.StaticToken{Token: "checkout-two-token", Principal: checkoutTwo})
	return newFixture(t, append([]func(*pigeon.Options){func(o *pigeon.Options) {
		o.Catalog, o.Authenticator = cat, pigeon.NewStaticTokens(tokens...)
	}}, mutate...)...)
}

// TestRepliesAreRateLimited: a reply skipped the rate gate, so a
// responder (any principal that may receive on a request/reply subject)
// could answer one stored request, however old, as fast as it liked: each
// reply one hash-chained reply.routed record, a hand-over, and in a
// cluster a notice to every node, with no bound from the subject's
// rateLimit. A reply now takes a token of the subject's rateLimit from the
// replier's bucket toward the requester (subject, replier, requester), so
// the replies to one requester are held to the rate its requests are; the
// replies to another requester, and the requester's own publishes, are
// not touched.
func TestRepliesAreRateLimited(t *testing.T) {
	f := replyRateFixture(t)
	checkout := f.connect("checkout-token", "payments.authorize")
	other := f.connect("checkout-two-token", "payments.authorize")
	gateway := f.connect("gateway-token", "payments.authorize")

	req, err := checkout.Publish(ctx, demo.Payment("o-1"))
	require.NoError(t, err)
	reply := func(requestID string) error {
		_, err := gateway.Publish(ctx, demo.Approval(requestID))
		return err
	}
	require.NoError(t, reply(req.Message.ID), "the first reply is within the burst")
	for range 5 {
		pe := requireCode(t, reply(req.Message.ID), pigeon.CodeRateLimited)
		require.Equal(t, pigeon.GateRate, pe.Decision.Gate)
	}
	require.Len(t, auditOf(t, f.e, pigeon.EventReplyRouted), 1, "only the reply admitted is routed")
	written, _ := refusedForRate(auditOf(t, f.e, pigeon.EventPublishDenied))
	require.Len(t, written, 1, "refused replies coalesce as refused publishes do")

	// Another requester's request gets its reply: the bucket is the
	// replier's toward each requester, not the replier's in all.
	req2, err := other.Publish(ctx, demo.Payment("o-2"))
	require.NoError(t, err)
	require.NoError(t, reply(req2.Message.ID), "a responder serves each requester at the subject's rate")

	// The bucket refills at the subject's rate.
	f.clock.Advance(time.Second)
	require.NoError(t, reply(req.Message.ID))
}

// TestRateLimitedPublishKeepsNothing: a publish refused RATE_LIMITED
// takes neither its id nor its idempotency key, whatever path it came by
// (Publish, PublishBatch, Request): the same message sent again once the
// bucket refills is accepted as new, not answered MESSAGE_ID_TAKEN or
// duplicate, and a message accepted before is still answered duplicate.
func TestRateLimitedPublishKeepsNothing(t *testing.T) {
	f := replyRateFixture(t)
	checkout := f.connect("checkout-token", "payments.authorize")
	c := callerOf(checkout)

	first := demo.Payment("o-1")
	first.ID = "msg-first"
	res, err := checkout.Publish(ctx, first)
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusAccepted, res.Status)

	byID := demo.Payment("o-2")
	byID.ID = "msg-second"
	requireCode(t, func() error { _, err := checkout.Publish(ctx, byID); return err }(), pigeon.CodeRateLimited)
	batch := f.e.PublishBatch(ctx, c, []*pigeon.Message{demo.Payment("o-3"), demo.Payment("o-4")})
	for _, p := range batch {
		requireCode(t, p.Err, pigeon.CodeRateLimited)
	}
	requestCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req := demo.Payment("o-5")
	req.ID = "msg-request"
	_, err = f.e.Request(requestCtx, c, req)
	requireCode(t, err, pigeon.CodeRateLimited)

	for _, m := range []*pigeon.Message{byID, demo.Payment("o-3"), demo.Payment("o-4"), req} {
		f.clock.Advance(time.Second)
		res, err := checkout.Publish(ctx, m)
		require.NoError(t, err, "%s", m.IdempotencyKey)
		require.Equal(t, pigeon.StatusAccepted, res.Status, "%s was taken by its refusal", m.IdempotencyKey)
	}
	f.clock.Advance(time.Second)
	res, err = checkout.Publish(ctx, first)
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusDuplicate, res.Status)
}
