package pigeon

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGrantPrincipalMergedAgainHeldToTheBounds: a grant token's principal
// is held to the bounds at authentication (checkPrincipal), and again
// wherever its roles (the grant's that its account still holds) and its
// account's attributes are read again: negotiating on it and renewing
// its contract are refused UNAUTHENTICATED, the role bridge it carries
// lets it publish at no depth, and its contract's next check
// GRANT_REVOKED. The grant's record and its account are read from a
// store, where a writer behind the broker's back may leave what
// IssueGrant and CreateAccount refuse; this puts such a grant and account
// in the directory's maps after the token authenticated, as a reload of
// that store would. Before, currentPrincipal and checkAccess took the
// grant's roles and the account's attributes whatever their number.
func TestGrantPrincipalMergedAgainHeldToTheBounds(t *testing.T) {
	ctx := context.Background()
	const carol = "carol"
	many := []string{"member", RoleBridge}
	for i := range MaxPrincipalRoles {
		many = append(many, "role-"+strconv.Itoa(i))
	}
	cases := []struct {
		name   string
		change func(g *grantRecord, a *Account)
	}{
		{"the grant's roles its account holds past MaxPrincipalRoles", func(g *grantRecord, a *Account) {
			g.Roles, a.Roles = many, many
		}},
		{"the account's attributes past MaxAccountAttributes", func(_ *grantRecord, a *Account) {
			a.Attributes = attrsNamed("a", MaxAccountAttributes+1, "v")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(ctx, &Options{Catalog: &Catalog{Subjects: []SubjectPolicy{{
				Name: "t.x", Version: "v1", Mode: ModePubSub, Intents: []string{"test"},
				Policy: map[Operation][]RuleSpec{OpPublish: {{Effect: "allow", Principals: []string{carol}}}},
			}}}})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, e.Shutdown(ctx)) })
			_, err = e.CreateAccount(ctx, Account{ID: carol, Roles: []string{"member", RoleBridge}})
			require.NoError(t, err)
			g, err := e.IssueGrant(ctx, carol, []string{"member", RoleBridge}, time.Hour)
			require.NoError(t, err)
			p, err := e.Authenticate(ctx, g.Token)
			require.NoError(t, err)
			c, err := e.Negotiate(ctx, p, "", []string{"t.x"}, time.Minute)
			require.NoError(t, err)
			require.True(t, e.MayPublishAtDepth(p), "the grant carries bridge")

			unlock := e.dir.lockChange()
			rec := *e.dir.grants[g.JTI]
			a := cloneAccount(e.dir.accounts[carol])
			tc.change(&rec, &a)
			e.dir.grants[g.JTI], e.dir.accounts[carol] = &rec, &a
			e.dir.bump()
			unlock()

			_, err = e.Negotiate(ctx, p, "", []string{"t.x"}, time.Minute)
			require.Equal(t, CodeUnauthenticated, ErrorCode(err), "negotiate: %v", err)
			_, err = e.RenewContract(ctx, p, c.ID(), time.Minute)
			require.Equal(t, CodeUnauthenticated, ErrorCode(err), "renew: %v", err)
			require.False(t, e.MayPublishAtDepth(p))
			_, code, _ := e.checkContract(ctx, c.ID(), p, e.subject("t.x"), OpPublish)
			require.Equal(t, CodeGrantRevoked, code)
			_, err = e.Authenticate(ctx, g.Token)
			require.Equal(t, CodeUnauthenticated, ErrorCode(err))
		})
	}
}
