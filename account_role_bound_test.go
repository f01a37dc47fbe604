package pigeon_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// TestAccountHoldsAtMostMaxPrincipalRoles: every principal of an account
// carries the account's roles, and a principal carries at most
// MaxPrincipalRoles, so an account holds at most that many too.
// CreateAccount refuses more (INVALID_ARGUMENT; roles named twice
// counted once), and AddAccountRole refuses a role the account does not
// hold once it holds as many; nothing is created, changed or audited
// then. A role the account holds is given again, and one taken away
// makes room. Before, an account held any number of roles, and every
// principal merged with it carried them all.
func TestAccountHoldsAtMostMaxPrincipalRoles(t *testing.T) {
	f := accessFixture(t)
	_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: dave, Roles: rolesOf(pigeon.MaxPrincipalRoles + 1)})
	requireCode(t, err, pigeon.CodeInvalidArgument)
	_, err = f.e.GetAccount(ctx, dave)
	requireCode(t, err, pigeon.CodeNotFound)
	require.Empty(t, auditOf(t, f.e, pigeon.EventAccountCreated))

	a, err := f.e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: append(rolesOf(pigeon.MaxPrincipalRoles), "role-0")})
	require.NoError(t, err, "a role named twice is held once")
	require.Len(t, a.Roles, pigeon.MaxPrincipalRoles)

	_, err = f.e.AddAccountRole(ctx, carol, "one-more")
	requireCode(t, err, pigeon.CodeInvalidArgument)
	a, err = f.e.GetAccount(ctx, carol)
	require.NoError(t, err)
	require.Len(t, a.Roles, pigeon.MaxPrincipalRoles)
	require.NotContains(t, a.Roles, "one-more")
	require.Empty(t, auditOf(t, f.e, pigeon.EventAccountRoleAdded))

	_, err = f.e.AddAccountRole(ctx, carol, "role-0")
	require.NoError(t, err, "a role the account holds")
	_, err = f.e.RemoveAccountRole(ctx, carol, "role-1")
	require.NoError(t, err)
	a, err = f.e.AddAccountRole(ctx, carol, "one-more")
	require.NoError(t, err, "a role taken away makes room")
	require.Len(t, a.Roles, pigeon.MaxPrincipalRoles)
	require.Contains(t, a.Roles, "one-more")
}

// TestAccountStoredOverTheRoleBoundLoadsAndFailsClosed: an account an
// earlier broker stored with more roles than an account may now hold
// loads, neither refused nor skipped (its roles may take access away: a
// deny rule may name one, and skipping the account would lift it;
// refusing to start would stop the upgrade). Its principals fail closed
// instead: authenticating one merged with it is refused UNAUTHENTICATED
// (audited auth.failed), and the account is given no role it does not
// hold. Taking roles from it, as a revocation, goes on, and once it holds
// no more than MaxPrincipalRoles its principals authenticate again.
// Before, the account's principals carried its roles whatever their
// number.
func TestAccountStoredOverTheRoleBoundLoadsAndFailsClosed(t *testing.T) {
	roles, err := json.Marshal(rolesOf(pigeon.MaxPrincipalRoles + 1))
	require.NoError(t, err)
	st := storeOf(t, storedRecord{"accounts", carol, storedAccount(carol, `"roles":`+string(roles))})
	f := accessFixture(t, func(o *pigeon.Options) { o.Store = st })
	a, err := f.e.GetAccount(ctx, carol)
	require.NoError(t, err, "the account loads")
	require.Len(t, a.Roles, pigeon.MaxPrincipalRoles+1)

	p, err := f.e.Authenticate(ctx, "carol-token")
	requireCode(t, err, pigeon.CodeUnauthenticated)
	require.Nil(t, p)
	require.Equal(t, 1, auditCount(t, f.e, pigeon.EventAuthFailed, pigeon.CodeUnauthenticated))
	_, err = f.e.Connect(ctx, "carol-token", []string{"rooms.chat"})
	requireCode(t, err, pigeon.CodeUnauthenticated)
	_, err = f.e.AddAccountRole(ctx, carol, "one-more")
	requireCode(t, err, pigeon.CodeInvalidArgument)

	_, err = f.e.RemoveAccountRole(ctx, carol, "role-0")
	require.NoError(t, err)
	p, err = f.e.Authenticate(ctx, "carol-token")
	require.NoError(t, err, "the account within its bound again")
	require.Len(t, p.Roles, pigeon.MaxPrincipalRoles)

	e, err := pigeon.New(ctx, &pigeon.Options{Store: st, Catalog: demo.Catalog(), Region: "uk"})
	require.NoError(t, err, "the next start loads it as well")
	require.NoError(t, e.Shutdown(ctx))
}
