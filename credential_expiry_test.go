package pigeon_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/transporttest"
)

// expiringTokens authenticates the transport suite's tokens as a method
// whose credentials expire would: each principal's Expires is expires()
// at the time it authenticates (zero: the credential does not expire).
func expiringTokens(expires func() time.Time) pigeon.Authenticator {
	static := transporttest.Options().Authenticator
	return pigeon.AuthenticatorFunc(func(ctx context.Context, credential string) (*pigeon.Principal, error) {
		p, err := static.Authenticate(ctx, credential)
		if err != nil {
			return nil, err
		}
		q := *p // the table hands out a shared principal
		q.Expires = expires()
		return &q, nil
	})
}

// expiringFixture is an engine of the transport suite's catalog on a fake
// clock whose principals' credentials expire at expires() (nil: never).
func expiringFixture(t *testing.T, expires func() time.Time) *fixture {
	return newFixture(t, func(o *pigeon.Options) {
		base := transporttest.Options()
		o.Catalog = base.Catalog
		o.Authenticator = expiringTokens(expires)
	})
}

func TestContractExpiresWithCredential(t *testing.T) {
	tests := []struct {
		name string
		cred time.Duration // when the credential expires (0: never)
		ttl  time.Duration // the lifetime asked for (0: the default)
		want time.Duration // when the contract expires
	}{
		{"credential expires before the default ttl", 5 * time.Minute, 0, 5 * time.Minute},
		{"credential expires before the ttl asked for", 2 * time.Hour, 4 * time.Hour, 2 * time.Hour},
		{"credential outlives the default ttl", time.Hour, 0, pigeon.DefaultContractTTL},
		{"credential outlives the ttl asked for", time.Hour, time.Minute, time.Minute},
		{"credential does not expire", 0, 0, pigeon.DefaultContractTTL},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := newClock().Now()
			var expires time.Time
			if tc.cred > 0 {
				expires = start.Add(tc.cred)
			}
			f := expiringFixture(t, func() time.Time { return expires })
			// An account of the principal: the engine merges the two and
			// must keep the credential's expiry.
			_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: transporttest.Alice, Roles: []string{"member"}})
			require.NoError(t, err)
			p, err := f.e.Authenticate(ctx, "alice-token")
			require.NoError(t, err)
			require.Equal(t, []string{"member"}, p.Roles, "merged with its account")
			require.True(t, p.Expires.Equal(expires), "the merged principal keeps Expires: %v", p.Expires)

			// Without renewal: a renewal goroutine first scheduled after
			// the clock's advance would see a millisecond left and renew.
			s, err := f.e.Connect(ctx, "alice-token", []string{"chat.messages"}, pigeon.WithContractTTL(tc.ttl), pigeon.WithoutAutoRenew())
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close(ctx) })
			at := start.Add(tc.want)
			require.Equal(t, at, s.Contract().ExpiresAt())
			require.Equal(t, at, s.Contract().Info().ExpiresAt)

			f.clock.Advance(tc.want - time.Millisecond)
			_, err = s.Publish(ctx, chatMessage("before"))
			require.NoError(t, err, "the contract works until its expiry")
			f.clock.Advance(time.Millisecond)
			_, err = s.Publish(ctx, chatMessage("at"))
			requireCode(t, err, pigeon.CodeContractExpired)
		})
	}
}

func TestGrantPrincipalExpiresWithTheGrant(t *testing.T) {
	f := expiringFixture(t, func() time.Time { return time.Time{} })
	_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: transporttest.Alice, Roles: []string{"member"}})
	require.NoError(t, err)
	g, err := f.e.IssueGrant(ctx, transporttest.Alice, []string{"member"}, 5*time.Minute)
	require.NoError(t, err)
	p, err := f.e.Authenticate(ctx, g.Token)
	require.NoError(t, err)
	require.Equal(t, pigeon.AuthGrant, p.Method)
	require.True(t, p.Expires.Equal(g.ExpiresAt), "a grant principal expires with its grant: %v, want %v", p.Expires, g.ExpiresAt)
	k, err := f.e.Negotiate(ctx, p, "", []string{"chat.messages"}, 0)
	require.NoError(t, err)
	require.True(t, k.ExpiresAt().Equal(g.ExpiresAt), "the contract lives no longer than the grant")

	f.clock.Advance(5 * time.Minute)
	_, err = f.e.Negotiate(ctx, p, "", []string{"chat.messages"}, 0)
	requireCode(t, err, pigeon.CodeUnauthenticated)
}

func TestNegotiateRefusedOnceCredentialExpired(t *testing.T) {
	start := newClock().Now()
	expires := start.Add(10 * time.Minute)
	f := expiringFixture(t, func() time.Time { return expires })
	// The principal a WebSocket connection keeps from its upgrade.
	p, err := f.e.Authenticate(ctx, "alice-token")
	require.NoError(t, err)

	tests := []struct {
		name    string
		advance time.Duration // from the previous case
		code    pigeon.Code   // "": negotiated
	}{
		{"before the credential expires", 10*time.Minute - time.Nanosecond, ""},
		{"as it expires", time.Nanosecond, pigeon.CodeUnauthenticated},
		{"after it expired", time.Hour, pigeon.CodeUnauthenticated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f.clock.Advance(tc.advance)
			before := refusalCount(t, f.e, pigeon.EventContractDenied, pigeon.CodeUnauthenticated)
			k, err := f.e.Negotiate(ctx, p, "", []string{"chat.messages"}, 0)
			if tc.code == "" {
				require.NoError(t, err)
				require.True(t, k.ExpiresAt().Equal(expires))
				return
			}
			pe := requireCode(t, err, tc.code)
			require.ErrorIs(t, err, pigeon.ErrUnauthenticated)
			require.Contains(t, pe.Message, "credential has expired")
			require.Contains(t, pe.Message, "reconnect with a fresh one")
			require.Equal(t, before+1, refusalCount(t, f.e, pigeon.EventContractDenied, pigeon.CodeUnauthenticated),
				"the refusal is audited as contract.denied")
		})
	}
}

// TestSubscriptionEndsWhenTheCredentialExpires runs on the real clock: an
// idle subscription, which no delivery wakes, ends at the instant its
// credential (and so its contract) expires, not at its next delivery.
func TestSubscriptionEndsWhenTheCredentialExpires(t *testing.T) {
	const life = 500 * time.Millisecond
	var expires time.Time
	f := newFixture(t, func(o *pigeon.Options) {
		o.Catalog = transporttest.Options().Catalog
		o.Authenticator = expiringTokens(func() time.Time { return expires })
		o.Now = nil
	})
	expires = time.Now().Add(life)
	alice := f.connect("alice-token", "chat.messages")
	bob := f.connect("bob-token", "chat.messages")
	require.True(t, alice.Contract().ExpiresAt().Equal(expires))

	got := make(chan string, 8)
	sub, err := alice.Subscribe(ctx, "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
		got <- string(d.Message.Data)
		return nil
	})
	require.NoError(t, err)
	_, err = bob.Publish(ctx, chatMessage("live"))
	require.NoError(t, err)
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery while the credential was valid")
	}

	select {
	case <-sub.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription outlived the credential")
	}
	require.False(t, time.Now().Before(expires), "ended before the credential expired")
	requireCode(t, sub.Err(), pigeon.CodeContractExpired)
	_, err = alice.Publish(ctx, chatMessage("late"))
	requireCode(t, err, pigeon.CodeContractExpired)
	// What a connection authenticated before the expiry holds.
	p, err := f.e.Authenticate(ctx, "alice-token")
	require.NoError(t, err)
	_, err = f.e.Negotiate(ctx, p, "", []string{"chat.messages"}, 0)
	requireCode(t, err, pigeon.CodeUnauthenticated)
	require.Empty(t, got, "nothing delivered after the expiry")
}
