package pigeon_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/transporttest"
)

// TestRenewContractKeepsTheSessionGoing: a contract renewed before it
// expires keeps its id, and what runs under it goes on past the old
// expiry: a subscription keeps receiving, publishes are admitted. The
// renewal is audited; a renewal that would not lengthen the contract
// changes nothing.
func TestRenewContractKeepsTheSessionGoing(t *testing.T) {
	const life = 700 * time.Millisecond // room for the steps before the old expiry, under -race
	f := newFixture(t, func(o *pigeon.Options) {
		o.Catalog = transporttest.Options().Catalog
		o.Authenticator = transporttest.Options().Authenticator
		o.Now = nil
	})
	alice, err := f.e.Connect(ctx, "alice-token", []string{"chat.messages"}, pigeon.WithContractTTL(life))
	require.NoError(t, err)
	t.Cleanup(func() { _ = alice.Close(context.Background()) })
	bob := f.connect("bob-token", "chat.messages")
	k := alice.Contract()
	first := k.ExpiresAt()

	got := make(chan string, 8)
	sub, err := alice.Subscribe(ctx, "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
		got <- string(d.Message.Data)
		return nil
	})
	require.NoError(t, err)
	_, err = bob.Publish(ctx, chatMessage("before"))
	require.NoError(t, err)
	select { // the subscription runs, its end armed at the old expiry
	case m := <-got:
		require.Contains(t, m, "before")
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery before the renewal")
	}

	p, err := f.e.Authenticate(ctx, "alice-token")
	require.NoError(t, err)
	renewed, err := f.e.RenewContract(ctx, p, k.ID(), time.Hour)
	require.NoError(t, err)
	require.Equal(t, k.ID(), renewed.ID())
	require.True(t, renewed.ExpiresAt().After(first.Add(50*time.Minute)), "renewed to about an hour: %v", renewed.ExpiresAt())
	require.Equal(t, renewed.ExpiresAt(), alice.Contract().ExpiresAt(), "the session's contract is the renewed one")
	require.Equal(t, renewed.ExpiresAt(), renewed.Info().ExpiresAt)

	time.Sleep(time.Until(first) + 100*time.Millisecond)
	_, err = bob.Publish(ctx, chatMessage("after the old expiry"))
	require.NoError(t, err)
	select {
	case m := <-got:
		require.Contains(t, m, "after the old expiry")
	case <-time.After(10 * time.Second):
		t.Fatalf("the subscription ended at the old expiry: %v", sub.Err())
	}
	_, err = alice.Publish(ctx, chatMessage("mine"))
	require.NoError(t, err, "the renewed contract admits publishes past the old expiry")

	// Shorter than what it has: nothing changes, nothing is recorded.
	again, err := f.e.RenewContract(ctx, p, k.ID(), time.Minute)
	require.NoError(t, err)
	require.Equal(t, renewed.ExpiresAt(), again.ExpiresAt())
	recs := auditOf(t, f.e, pigeon.EventContractRenewed)
	require.Len(t, recs, 1)
	require.Equal(t, k.ID(), recs[0].ContractID)
	require.Equal(t, transporttest.Alice, recs[0].Principal)

	// The store holds the new expiry: a restarted broker would too.
	stored, err := f.e.GetContract(ctx, p, k.ID())
	require.NoError(t, err)
	require.Equal(t, renewed.ExpiresAt(), stored.ExpiresAt())
}

// TestRenewContractRefusals: a renewal is checked as every use of the
// contract is, and bounded as negotiation is; each refusal is typed and
// audited, and leaves the contract as it was.
func TestRenewContractRefusals(t *testing.T) {
	var credentialEnds time.Time // zero: the credential does not expire
	f := expiringFixture(t, func() time.Time { return credentialEnds })
	alice := f.connect("alice-token", "chat.messages")
	k := alice.Contract()
	principal := func(token string) *pigeon.Principal {
		p, err := f.e.Authenticate(ctx, token)
		require.NoError(t, err)
		return p
	}

	for _, tc := range []struct {
		name  string
		token string
		id    string
		ttl   time.Duration
		code  pigeon.Code
	}{
		{"unknown contract", "alice-token", "ctr_nope", 0, pigeon.CodeContractNotFound},
		{"another principal's", "bob-token", k.ID(), 0, pigeon.CodeContractPrincipalMismatch},
		{"negative ttl", "alice-token", k.ID(), -time.Second, pigeon.CodeInvalidArgument},
		{"ttl above the maximum", "alice-token", k.ID(), 48 * time.Hour, pigeon.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.e.RenewContract(ctx, principal(tc.token), tc.id, tc.ttl)
			requireCode(t, err, tc.code)
			require.Equal(t, k.ExpiresAt(), alice.Contract().ExpiresAt())
		})
	}
	require.Equal(t, 1, auditCount(t, f.e, pigeon.EventContractDenied, pigeon.CodeContractNotFound))

	t.Run("bounded by the credential", func(t *testing.T) {
		credentialEnds = f.clock.Now().Add(20 * time.Minute)
		renewed, err := f.e.RenewContract(ctx, principal("alice-token"), k.ID(), time.Hour)
		require.NoError(t, err)
		require.True(t, renewed.ExpiresAt().Equal(credentialEnds), "%v", renewed.ExpiresAt())
	})
	t.Run("credential expired", func(t *testing.T) {
		p := principal("alice-token")
		f.clock.Advance(21 * time.Minute)
		_, err := f.e.RenewContract(ctx, p, k.ID(), 0)
		requireCode(t, err, pigeon.CodeUnauthenticated)
	})
	t.Run("contract expired", func(t *testing.T) {
		credentialEnds = time.Time{}
		_, err := f.e.RenewContract(ctx, principal("alice-token"), k.ID(), 0)
		requireCode(t, err, pigeon.CodeContractExpired)
	})
	t.Run("revoked", func(t *testing.T) {
		live := f.connect("alice-token", "chat.messages")
		p := principal("alice-token")
		require.NoError(t, f.e.RevokeContract(ctx, p, live.Contract().ID()))
		_, err := f.e.RenewContract(ctx, p, live.Contract().ID(), 0)
		requireCode(t, err, pigeon.CodeContractRevoked)
	})
}

// TestRenewContractRefusedWhenAccessChanged: a renewal does not carry a
// contract past a change that took its ground away: a subject's policy
// replaced since (CONTRACT_STALE), or the grant it was negotiated with
// revoked or the role it relied on taken away (GRANT_REVOKED). The
// refusals are audited and leave the contract as it was.
func TestRenewContractRefusedWhenAccessChanged(t *testing.T) {
	t.Run("policy changed", func(t *testing.T) {
		f := newFixture(t)
		s := f.connect("checkout-token", "payments.authorize")
		p, err := f.e.Authenticate(ctx, "checkout-token")
		require.NoError(t, err)
		sp, err := f.e.Subject("payments.authorize")
		require.NoError(t, err)
		sp.Version = "v2"
		sp.Intents = append(sp.Intents, "refund_payment")
		require.NoError(t, f.e.ReplaceSubject(ctx, sp))
		_, err = f.e.RenewContract(ctx, p, s.Contract().ID(), time.Hour)
		requireCode(t, err, pigeon.CodeContractStale)
		require.Equal(t, 1, auditCount(t, f.e, pigeon.EventContractDenied, pigeon.CodeContractStale))
	})
	grantee := func(t *testing.T, f *fixture) (*pigeon.Principal, pigeon.Contract, string) {
		t.Helper()
		_, err := f.e.PutRole(ctx, pigeon.Role{Name: "notifier", Permissions: []pigeon.Permission{
			{Subject: "notifications.send", Operations: []pigeon.Operation{pigeon.OpPublish}}}})
		require.NoError(t, err)
		_, err = f.e.CreateAccount(ctx, pigeon.Account{ID: "renew-grantee", Roles: []string{"notifier"}})
		require.NoError(t, err)
		g, err := f.e.IssueGrant(ctx, "renew-grantee", []string{"notifier"}, time.Hour)
		require.NoError(t, err)
		p, err := f.e.Authenticate(ctx, g.Token)
		require.NoError(t, err)
		k, err := f.e.Negotiate(ctx, p, "", []string{"notifications.send"}, time.Minute)
		require.NoError(t, err)
		_, err = f.e.RenewContract(ctx, p, k.ID(), 2*time.Minute)
		require.NoError(t, err, "renewed while the grant stands")
		return p, k, g.JTI
	}
	t.Run("role taken away", func(t *testing.T) {
		// The caller's credential still stands; the contract's ground,
		// the role it was negotiated through, does not.
		f := newFixture(t)
		p, k, _ := grantee(t, f)
		_, err := f.e.RemoveAccountRole(ctx, "renew-grantee", "notifier")
		require.NoError(t, err)
		before := k.ExpiresAt()
		_, err = f.e.RenewContract(ctx, p, k.ID(), time.Hour)
		requireCode(t, err, pigeon.CodeGrantRevoked)
		require.Equal(t, before, k.ExpiresAt(), "a refused renewal leaves the contract as it was")
	})
	t.Run("grant revoked", func(t *testing.T) {
		f := newFixture(t)
		p, k, jti := grantee(t, f)
		require.NoError(t, f.e.RevokeGrant(ctx, jti))
		before := k.ExpiresAt()
		_, err := f.e.RenewContract(ctx, p, k.ID(), time.Hour)
		requireCode(t, err, pigeon.CodeGrantRevoked)
		require.Equal(t, before, k.ExpiresAt(), "a refused renewal leaves the contract as it was")
		require.Equal(t, 1, auditCount(t, f.e, pigeon.EventContractDenied, pigeon.CodeGrantRevoked))
	})
}

// TestRenewSchedule pins the schedule every session and client renews on:
// a tenth of the life left ahead of expiry, at least 5 s (half of it
// under 10 s); a failure that may pass tried again after a quarter of
// what is left, between 100 ms and 5 s.
func TestRenewSchedule(t *testing.T) {
	for _, tc := range []struct{ left, lead, retry time.Duration }{
		{200 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond},
		{time.Second, 500 * time.Millisecond, 250 * time.Millisecond},
		{8 * time.Second, 4 * time.Second, 2 * time.Second},
		{10 * time.Second, 5 * time.Second, 2500 * time.Millisecond},
		{30 * time.Second, 5 * time.Second, 5 * time.Second},
		{15 * time.Minute, 90 * time.Second, 5 * time.Second},
		{24 * time.Hour, 144 * time.Minute, 5 * time.Second},
	} {
		require.Equal(t, tc.lead, pigeon.RenewLead(tc.left), "lead for %v", tc.left)
		require.Equal(t, tc.retry, pigeon.RenewRetry(tc.left), "retry for %v", tc.left)
		require.Equal(t, tc.left-tc.lead, pigeon.RenewDelay(tc.left, 0), "delay for %v", tc.left)
		require.Equal(t, tc.retry, pigeon.RenewDelay(tc.left, pigeon.RenewRetry(tc.left)), "delay of a retry for %v", tc.left)
	}
	require.Equal(t, time.Second, pigeon.RenewDelay(time.Second, time.Minute), "a retry never waits past the expiry")
}
