package pigeon_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A grant whose token would be too large to authenticate is refused when
// it is issued. Before, IssueGrant signed any number of roles, and a token
// whose claims were over 8 KiB was handed out although the grant
// authenticator of an identity chain (GrantTokens) never recognised it.
func TestGrantTooLargeForItsTokenRefused(t *testing.T) {
	f := accessFixture(t, func(o *pigeon.Options) { o.Authenticator = grantsOnly{} })
	e := f.e
	_, err := e.CreateAccount(ctx, pigeon.Account{ID: carol})
	require.NoError(t, err)
	roles := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = strings.Repeat("r", 200) + strings.Repeat("x", i)
		}
		return out
	}
	g, err := e.IssueGrant(ctx, carol, roles(20), time.Hour)
	require.NoError(t, err, "a grant of 20 long role names fits")
	p, err := e.Authenticate(ctx, g.Token)
	require.NoError(t, err)
	require.Equal(t, carol, p.ID)

	_, err = e.IssueGrant(ctx, carol, roles(40), time.Hour)
	requireCode(t, err, pigeon.CodeInvalidArgument)
}

// grantsOnly is an identity chain of one method, the broker's grant
// tokens, as an edge that accepts only them is configured.
type grantsOnly struct{}

func (grantsOnly) Authenticate(ctx context.Context, tok string) (*pigeon.Principal, error) {
	return pigeon.GrantTokens().Authenticate(ctx, tok)
}

func (grantsOnly) AuthenticateCredential(ctx context.Context, c pigeon.Credential) (*pigeon.Principal, error) {
	return pigeon.GrantTokens().Authenticate(ctx, c.Bearer)
}

// A grant token's expiry is in whole seconds, and so is the grant's: the
// expiry IssueGrant reports is the one the token carries, and a ttl under
// a second, whose token would be born expired, is INVALID_ARGUMENT.
// Before, a ttl of 500 ms returned a token that no check ever accepted,
// and one of 1.5 s reported an expiry half a second after the token's.
func TestGrantTTLInWholeSeconds(t *testing.T) {
	clk := newClock()
	f := accessFixture(t, func(o *pigeon.Options) { o.Now = clk.Now })
	e := f.e
	_, err := e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		want time.Duration // 0: refused
	}{
		{"a millisecond", time.Millisecond, 0},
		{"half a second", 500 * time.Millisecond, 0},
		{"just under a second", time.Second - time.Nanosecond, 0},
		{"a second", time.Second, time.Second},
		{"a second and a half", 1500 * time.Millisecond, time.Second},
		{"a minute and change", time.Minute + 999*time.Millisecond, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := e.IssueGrant(ctx, carol, []string{"member"}, tc.ttl)
			if tc.want == 0 {
				requireCode(t, err, pigeon.CodeInvalidArgument)
				return
			}
			require.NoError(t, err)
			require.True(t, g.ExpiresAt.Equal(clk.Now().Truncate(time.Second).Add(tc.want)), "expires %s", g.ExpiresAt)
			p, err := e.Authenticate(ctx, g.Token)
			require.NoError(t, err)
			require.True(t, p.Expires.Equal(g.ExpiresAt), "the token expires at %s, the grant at %s", p.Expires, g.ExpiresAt)
		})
	}
}
