package pigeon_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
	"pigeon/store/memory"
)

// rateLimitedFixture is the demo catalog with payments.authorize limited to
// one publish a second (burst one), over a memory store the test keeps, so
// that it can read the audit log after Shutdown.
func rateLimitedFixture(t *testing.T) (*fixture, *recorder, store.Store) {
	t.Helper()
	st := memory.New(nil)
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	rec := newRecorder()
	cat := demo.Catalog()
	for i := range cat.Subjects {
		if cat.Subjects[i].Name == "payments.authorize" {
			cat.Subjects[i].RateLimit = &pigeon.RateLimitPolicy{PerSecond: 1, Burst: 1}
		}
	}
	f := newFixture(t, func(o *pigeon.Options) { o.Catalog, o.Store, o.Observer = cat, st, rec })
	return f, rec, st
}

// refusedForRate returns the publish.denied records with RATE_LIMITED in
// recs, and how many refusals they stand for.
func refusedForRate(recs []pigeon.AuditRecord) (out []pigeon.AuditRecord, refusals int) {
	for _, r := range recs {
		if r.Type != string(pigeon.EventPublishDenied) || r.Code != string(pigeon.CodeRateLimited) {
			continue
		}
		out = append(out, r)
		refusals++
		if n, ok := coalescedCount(r); ok {
			refusals += n - 1
		}
	}
	return out, refusals
}

// coalescedCount is the number of refusals a coalesced record stands for:
// the count after "coalesced:", up to the space before what follows it
// (the latest refusal's Ref, or auth.failed's method and source).
func coalescedCount(r pigeon.AuditRecord) (int, bool) {
	rest, ok := strings.CutPrefix(r.Ref, "coalesced:")
	if !ok {
		return 0, false
	}
	count, _, _ := strings.Cut(rest, " ")
	n, err := strconv.Atoi(count)
	return n, err == nil
}

// TestRateRefusalsCoalesce: a client over its rate limit is refused each
// time, and every refusal is observed, but the audit log takes the first
// refusal of each second in full and one record for the rest (Ref
// "coalesced:N"), so it grows with the limit, not with the refused
// traffic. The chain still verifies, other refusals are written one by
// one, and Shutdown writes a run still counting.
func TestRateRefusalsCoalesce(t *testing.T) {
	f, rec, st := rateLimitedFixture(t)
	s := f.connect("checkout-token", "payments.authorize")
	publish := func() error {
		_, err := s.Publish(ctx, demo.Payment("o"))
		return err
	}
	require.NoError(t, publish(), "the burst lets one through")
	for range 100 {
		requireCode(t, publish(), pigeon.CodeRateLimited)
	}
	rec.mu.Lock()
	require.Equal(t, 100, rec.events[pigeon.EventPublishDenied], "observers hear of every refusal")
	rec.mu.Unlock()

	written, refusals := refusedForRate(auditOf(t, f.e, pigeon.EventPublishDenied))
	require.Len(t, written, 1, "within the second only the first is written")
	require.Equal(t, 1, refusals)
	require.NotEmpty(t, written[0].MessageID)

	f.clock.Advance(time.Second)
	written, refusals = refusedForRate(auditOf(t, f.e, pigeon.EventPublishDenied))
	require.Len(t, written, 2, "once the second is over, one record stands for the rest")
	require.Equal(t, 100, refusals)
	sum := written[1]
	require.Equal(t, "coalesced:99", sum.Ref)
	require.Empty(t, sum.MessageID)
	require.Equal(t, "payments.authorize", sum.Subject)
	require.Equal(t, written[0].Principal, sum.Principal)
	require.Equal(t, string(pigeon.OutcomeDeny), sum.Outcome)

	// A new second: the bucket holds one again, then a new run starts.
	require.NoError(t, publish())
	for range 5 {
		requireCode(t, publish(), pigeon.CodeRateLimited)
	}
	// Another code is written one by one.
	bad := demo.Payment("o")
	bad.Intent = "steal"
	f.clock.Advance(time.Second)
	require.NoError(t, publish())
	for range 3 {
		_, err := s.Publish(ctx, bad)
		requireCode(t, err, pigeon.CodeRateLimited) // the rate gate comes first
	}
	written, refusals = refusedForRate(auditOf(t, f.e, pigeon.EventPublishDenied))
	require.Equal(t, 106, refusals, "two runs ended and are in the log; the third has its first refusal written, two counted")
	require.Len(t, written, 5)

	n, err := f.e.VerifyAudit(ctx)
	require.NoError(t, err, "the chain verifies")
	require.Positive(t, n)

	require.NoError(t, f.e.Shutdown(ctx))
	recs, err := st.ReadAudit(ctx, 0, 0)
	require.NoError(t, err)
	written, refusals = refusedForRate(recs)
	require.Equal(t, 108, refusals, "Shutdown writes the run still counting: every refusal is in the log")
	require.Len(t, written, 6)
}

// TestOtherRefusalsAreNotCoalesced: only refusals for rate are counted;
// any other refusal is written in full each time.
func TestOtherRefusalsAreNotCoalesced(t *testing.T) {
	f := newFixture(t)
	s := f.connect("checkout-token", "payments.authorize")
	for range 5 {
		m := demo.Payment("o")
		m.Intent = "steal"
		_, err := s.Publish(ctx, m)
		requireCode(t, err, pigeon.CodeIntentDenied)
	}
	recs := auditOf(t, f.e, pigeon.EventPublishDenied)
	require.Len(t, recs, 5)
	for _, r := range recs {
		require.NotEmpty(t, r.MessageID)
		require.Empty(t, r.Ref)
	}
}

// TestContractRefusalsCoalesce: a client looping on a contract the broker
// does not hold is refused each time at the contract gate, which judges
// who asks and not what is sent; like refusals for rate, the run is
// written as its first refusal and one record for the rest of its second.
func TestContractRefusalsCoalesce(t *testing.T) {
	f := newFixture(t)
	p, err := f.e.Authenticate(ctx, "checkout-token")
	require.NoError(t, err)
	c := pigeon.Caller{Principal: p, Region: "uk", ContractID: "ctr_gone"}
	var code pigeon.Code
	for range 20 {
		_, err := f.e.Publish(ctx, c, demo.Payment("o"))
		require.Error(t, err)
		code = pigeon.ErrorCode(err)
	}
	require.Len(t, refusedAt(t, f.e, pigeon.EventPublishDenied, pigeon.GateContract, code), 1, "within the second only the first is written")
	f.clock.Advance(time.Second)
	recs := refusedAt(t, f.e, pigeon.EventPublishDenied, pigeon.GateContract, code)
	require.Len(t, recs, 2)
	require.Equal(t, "coalesced:19", recs[1].Ref)
	require.Equal(t, "ctr_gone", recs[1].ContractID)
}

// TestEnvelopeRefusalsCoalesce: malformed envelopes are refused at the
// first gate, before the contract and rate gates, so a client could send
// them as fast as its connection goes; they are written as a run, one
// run whatever subject each names.
func TestEnvelopeRefusalsCoalesce(t *testing.T) {
	f := newFixture(t)
	s := f.connect("checkout-token", "payments.authorize")
	for i := range 30 {
		m := demo.Payment("o")
		m.Type = ""
		if i%2 == 1 {
			m.Subject = "made.up." + strconv.Itoa(i) // a new subject each time starts no run
		}
		_, err := s.Publish(ctx, m)
		requireCode(t, err, pigeon.CodeEnvelopeInvalid)
	}
	refused := func() []pigeon.AuditRecord {
		return refusedAt(t, f.e, pigeon.EventPublishDenied, pigeon.GateEnvelope, pigeon.CodeEnvelopeInvalid)
	}
	require.Len(t, refused(), 1, "within the second only the first is written")
	f.clock.Advance(time.Second)
	recs := refused()
	require.Len(t, recs, 2)
	require.Equal(t, "payments.authorize", recs[0].Subject)
	require.Equal(t, "coalesced:29", recs[1].Ref)
	require.Equal(t, "made.up.29", recs[1].Subject, "the summary names the latest")
}

// TestAckRefusalsCoalesce: acks of a message not leased to the caller are
// refused ACK_NOT_ALLOWED each time, and written as a run.
func TestAckRefusalsCoalesce(t *testing.T) {
	f := newFixture(t)
	pub := f.connect("checkout-token", "payments.authorize")
	res, err := pub.Publish(ctx, demo.Payment("o"))
	require.NoError(t, err)
	gw := f.connect("gateway-token", "payments.authorize")
	for range 10 {
		requireCode(t, gw.Ack(ctx, "payments.authorize", res.Message.ID), pigeon.CodeAckNotAllowed)
	}
	require.Len(t, auditOf(t, f.e, pigeon.EventAckDenied), 1)
	f.clock.Advance(time.Second)
	recs := auditOf(t, f.e, pigeon.EventAckDenied)
	require.Len(t, recs, 2)
	require.Equal(t, "coalesced:9", recs[1].Ref)
	require.Equal(t, res.Message.ID, recs[0].MessageID)
}

// TestCapRefusalsCoalesce: a principal at its most subscriptions that
// keeps asking for one more is refused TOO_MANY_SUBSCRIPTIONS each time,
// written as a run.
func TestCapRefusalsCoalesce(t *testing.T) {
	clock := newClock()
	f := accessFixture(t, func(o *pigeon.Options) { o.MaxSubscriptionsPerPrincipal, o.Now = 1, clock.Now })
	bob := f.connect("bob-token", "chat.messages")
	subscribeN(t, bob, 1)
	for range 10 {
		_, err := bob.Subscribe(ctx, "chat.messages", nopHandler)
		requireCode(t, err, pigeon.CodeTooManySubscriptions)
	}
	require.Len(t, refusedAt(t, f.e, pigeon.EventSubscribeDenied, "", pigeon.CodeTooManySubscriptions), 1)
	clock.Advance(time.Second)
	recs := refusedAt(t, f.e, pigeon.EventSubscribeDenied, "", pigeon.CodeTooManySubscriptions)
	require.Len(t, recs, 2)
	require.Equal(t, "coalesced:9", recs[1].Ref)
}

// refusedAt returns the records of type typ in e's audit log refused at
// gate, each required to carry code; with no gate, those with code.
func refusedAt(t *testing.T, e *pigeon.Engine, typ pigeon.Event, gate string, code pigeon.Code) []pigeon.AuditRecord {
	t.Helper()
	var out []pigeon.AuditRecord
	for _, r := range auditOf(t, e, typ) {
		switch {
		case gate != "" && r.Gate == gate:
			require.Equal(t, string(code), r.Code)
		case gate != "" || r.Code != string(code):
			continue
		}
		out = append(out, r)
	}
	return out
}
