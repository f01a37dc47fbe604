package pigeon_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/transporttest"
)

// A contract is bound to the credential it was negotiated with, not only
// to its principal: a grant token that hands a program one role of an
// account, or a static token of the account carrying fewer roles, may not
// act under a contract that a wider credential of the same account
// negotiated (contract ids travel in deliveries, so they are not secret).
// Before, the check compared principal ids only, so a narrow credential
// used a wide contract's publish and receive.
func TestContractBoundToItsCredential(t *testing.T) {
	f := accessFixture(t, func(o *pigeon.Options) {
		o.Authenticator = pigeon.NewStaticTokens(append(transporttest.Options().Authenticator.(*pigeon.StaticTokens).Tokens(),
			pigeon.StaticToken{Token: "carol-token", Principal: carol},
			pigeon.StaticToken{Token: "carol-writer-token", Principal: carol, Roles: []string{"writer"}})...)
	})
	e := f.e
	_, err := e.PutRole(ctx, pigeon.Role{Name: "writer", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish}}}})
	require.NoError(t, err)
	_, err = e.PutRole(ctx, pigeon.Role{Name: "reader", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpReceive}}}})
	require.NoError(t, err)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"reader"}})
	require.NoError(t, err)

	auth := func(cred string) *pigeon.Principal {
		p, err := e.Authenticate(ctx, cred)
		require.NoError(t, err)
		return p
	}
	writer := auth("carol-writer-token")
	wide, err := e.Negotiate(ctx, writer, "", []string{"rooms.chat"}, 0)
	require.NoError(t, err)
	require.Equal(t, []pigeon.Operation{pigeon.OpPublish, pigeon.OpReceive}, wide.Info().Subjects[0].Operations)

	g, err := e.IssueGrant(ctx, carol, []string{"reader"}, time.Hour)
	require.NoError(t, err)
	g2, err := e.IssueGrant(ctx, carol, []string{"reader"}, time.Hour)
	require.NoError(t, err)
	byGrant := auth(g.Token)
	narrow, err := e.Negotiate(ctx, byGrant, "", []string{"rooms.chat"}, 0)
	require.NoError(t, err)
	require.Equal(t, []pigeon.Operation{pigeon.OpReceive}, narrow.Info().Subjects[0].Operations)

	tests := []struct {
		name     string
		p        *pigeon.Principal
		contract pigeon.Contract
		code     pigeon.Code
	}{
		{"the negotiating credential", writer, wide, pigeon.CodeOK},
		{"the same credential, authenticated again", auth("carol-writer-token"), wide, pigeon.CodeOK},
		{"a grant of the account", byGrant, wide, pigeon.CodeContractPrincipalMismatch},
		{"a token of the account without the contract's role", auth("carol-token"), wide, pigeon.CodeContractPrincipalMismatch},
		{"the grant it was negotiated with", byGrant, narrow, pigeon.CodeOK},
		{"another grant of the same roles", auth(g2.Token), narrow, pigeon.CodeContractPrincipalMismatch},
		{"a wider token of the account", writer, narrow, pigeon.CodeContractPrincipalMismatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			caller := pigeon.Caller{Principal: tc.p, ContractID: tc.contract.ID()}
			check := func(err error) {
				t.Helper()
				if tc.code == pigeon.CodeOK {
					require.NoError(t, err)
					return
				}
				requireCode(t, err, tc.code)
			}
			_, err := e.Receive(ctx, caller, "rooms.chat", 1)
			check(err)
			if slicesHas(tc.contract.Info().Subjects[0].Operations, pigeon.OpPublish) {
				_, err = e.Publish(ctx, caller, chatIn("lobby", tc.name))
				check(err)
			}
			_, err = e.GetContract(ctx, tc.p, tc.contract.ID())
			check(err)
			_, err = e.RenewContract(ctx, tc.p, tc.contract.ID(), 0)
			check(err)
			if tc.code != pigeon.CodeOK {
				requireCode(t, e.RevokeContract(ctx, tc.p, tc.contract.ID()), tc.code)
			}
		})
	}
	// Neither contract was revoked by the refused callers.
	_, err = e.Publish(ctx, pigeon.Caller{Principal: writer, ContractID: wide.ID()}, chatIn("lobby", "still mine"))
	require.NoError(t, err)
	_, err = e.Receive(ctx, pigeon.Caller{Principal: byGrant, ContractID: narrow.ID()}, "rooms.chat", 1)
	require.NoError(t, err)
}

func slicesHas[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
