package pigeon_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// defineChatWriter defines the role writer, which publishes on rooms.chat
// (accessFixture's subject that no catalog rule opens).
func defineChatWriter(t *testing.T, e *pigeon.Engine) {
	t.Helper()
	_, err := e.PutRole(ctx, pigeon.Role{Name: "writer", Permissions: []pigeon.Permission{
		{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish}},
	}})
	require.NoError(t, err)
}

// TestPrincipalMergedAgainHeldToTheBounds: a connection authenticates
// once and negotiates, renews and publishes for hours on that principal,
// merged with its account again each time. An account that gains
// attributes (created, with attributes of its own, after the credential
// authenticated) or roles since can push what the principal carries past
// a principal's bounds (MaxAccountAttributes attributes, MaxPrincipalRoles
// roles), where authenticating the credential again is refused. Every
// place that merges it again holds it to the same bounds: negotiating
// again on it and renewing its contract are refused UNAUTHENTICATED, as
// authentication is (audited contract.denied), and the contract's next
// operation GRANT_REVOKED, as a contract whose account was deleted is.
// Before, only authentication held the merge to the bounds: the
// connection negotiated, renewed and published on a principal carrying
// 65 attributes or 257 roles.
func TestPrincipalMergedAgainHeldToTheBounds(t *testing.T) {
	cases := []struct {
		name   string
		token  pigeon.StaticToken
		before func(t *testing.T, e *pigeon.Engine) // the account when the credential authenticates
		gain   func(t *testing.T, e *pigeon.Engine)
	}{
		{
			name:  "attributes: the account created with its own since",
			token: pigeon.StaticToken{Token: "t", Principal: carol, Roles: []string{"writer"}, Attributes: attributesOf(pigeon.MaxAccountAttributes, "v")},
			gain: func(t *testing.T, e *pigeon.Engine) {
				_, err := e.CreateAccount(ctx, pigeon.Account{ID: carol, Attributes: map[string]string{"team": "payments"}})
				require.NoError(t, err)
			},
		},
		{
			name:  "roles: the account given roles since",
			token: pigeon.StaticToken{Token: "t", Principal: carol, Roles: append(rolesOf(pigeon.MaxPrincipalRoles-2), "writer")},
			before: func(t *testing.T, e *pigeon.Engine) {
				_, err := e.CreateAccount(ctx, pigeon.Account{ID: carol})
				require.NoError(t, err)
			},
			gain: func(t *testing.T, e *pigeon.Engine) {
				for _, r := range []string{"extra-a", "extra-b"} {
					_, err := e.AddAccountRole(ctx, carol, r)
					require.NoError(t, err, "the account alone holds %s within its bound", r)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := accessFixture(t, func(o *pigeon.Options) { o.Authenticator = pigeon.NewStaticTokens(tc.token) })
			defineChatWriter(t, f.e)
			if tc.before != nil {
				tc.before(t, f.e)
			}
			p, err := f.e.Authenticate(ctx, "t")
			require.NoError(t, err, "within the bounds when it authenticates")
			c, err := f.e.Negotiate(ctx, p, "", []string{"rooms.chat"}, 0)
			require.NoError(t, err)
			caller := pigeon.Caller{Principal: p, ContractID: c.ID()}
			_, err = f.e.Publish(ctx, caller, chatIn("lobby", "before"))
			require.NoError(t, err)

			tc.gain(t, f.e)
			before := auditCount(t, f.e, pigeon.EventContractDenied, pigeon.CodeUnauthenticated)
			_, err = f.e.Negotiate(ctx, p, "", []string{"rooms.chat"}, 0)
			requireCode(t, err, pigeon.CodeUnauthenticated)
			_, err = f.e.RenewContract(ctx, p, c.ID(), 0)
			requireCode(t, err, pigeon.CodeUnauthenticated)
			require.Equal(t, before+2, auditCount(t, f.e, pigeon.EventContractDenied, pigeon.CodeUnauthenticated))
			_, err = f.e.Publish(ctx, caller, chatIn("lobby", "after"))
			requireCode(t, err, pigeon.CodeGrantRevoked)
			_, err = f.e.Authenticate(ctx, "t")
			requireCode(t, err, pigeon.CodeUnauthenticated)
		})
	}
}

// TestRulesPrincipalMergedAgainHeldToTheBounds: a contract is held by any
// credential of its principal that carries at least what the credential
// it was negotiated with carried, and the rules see the caller with the
// attributes of the contract's account under those the caller's
// credential carries. A credential that authenticated before the account
// was created with attributes of its own, acting under a contract a
// narrower credential negotiated since, would carry both sets, past
// MaxAccountAttributes: its operation is refused GRANT_REVOKED, and the
// narrower credential's goes on. Before, the rules saw it carry 65
// attributes and the message was accepted.
func TestRulesPrincipalMergedAgainHeldToTheBounds(t *testing.T) {
	f := accessFixture(t, func(o *pigeon.Options) {
		o.Authenticator = pigeon.NewStaticTokens(
			pigeon.StaticToken{Token: "wide", Principal: carol, Roles: []string{"writer"}, Attributes: attributesOf(pigeon.MaxAccountAttributes, "v")},
			pigeon.StaticToken{Token: "narrow", Principal: carol, Roles: []string{"writer"}},
		)
	})
	defineChatWriter(t, f.e)
	wide, err := f.e.Authenticate(ctx, "wide")
	require.NoError(t, err, "no account yet")
	_, err = f.e.CreateAccount(ctx, pigeon.Account{ID: carol, Attributes: map[string]string{"team": "payments"}})
	require.NoError(t, err)
	narrow, err := f.e.Authenticate(ctx, "narrow")
	require.NoError(t, err)
	c, err := f.e.Negotiate(ctx, narrow, "", []string{"rooms.chat"}, 0)
	require.NoError(t, err)

	_, err = f.e.Publish(ctx, pigeon.Caller{Principal: wide, ContractID: c.ID()}, chatIn("lobby", "wide"))
	requireCode(t, err, pigeon.CodeGrantRevoked)
	_, err = f.e.Publish(ctx, pigeon.Caller{Principal: narrow, ContractID: c.ID()}, chatIn("lobby", "narrow"))
	require.NoError(t, err, "the contract holds for the credential it was negotiated with")
}

// TestMergedRolesHeldToTheBoundAtAuthentication: a credential's roles
// and its account's are each within MaxPrincipalRoles, but their union
// may not be: the principal merged with its account is refused
// UNAUTHENTICATED (audited auth.failed) when it would carry more, the
// roles the two share counted once. Before, checkPrincipal ran on the
// credential's roles alone, and the union was taken whatever its size.
func TestMergedRolesHeldToTheBoundAtAuthentication(t *testing.T) {
	others := make([]string, 100)
	for i := range others {
		others[i] = "other-" + string(rune('a'+i/26)) + string(rune('a'+i%26))
	}
	cases := []struct {
		name        string
		cred, acct  []string
		refused     bool
		wantRolesOf int
	}{
		{"the account's roles push the union over", rolesOf(200), others, true, 0},
		{"the roles the two share counted once", rolesOf(200), rolesOf(pigeon.MaxPrincipalRoles), false, pigeon.MaxPrincipalRoles},
		{"the account's alone at the bound", nil, rolesOf(pigeon.MaxPrincipalRoles), false, pigeon.MaxPrincipalRoles},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := accessFixture(t, func(o *pigeon.Options) {
				o.Authenticator = pigeon.NewStaticTokens(pigeon.StaticToken{Token: "t", Principal: carol, Roles: tc.cred})
			})
			_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: tc.acct})
			require.NoError(t, err, "the account alone is within its bound")
			p, err := f.e.Authenticate(ctx, "t")
			if !tc.refused {
				require.NoError(t, err)
				require.Len(t, p.Roles, tc.wantRolesOf)
				return
			}
			requireCode(t, err, pigeon.CodeUnauthenticated)
			require.Nil(t, p)
			require.Equal(t, 1, auditCount(t, f.e, pigeon.EventAuthFailed, pigeon.CodeUnauthenticated))
		})
	}
}
