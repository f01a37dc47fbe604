package pigeon_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A grant hands its principal the roles it carries, and a principal
// carries at most MaxPrincipalRoles: IssueGrant refuses a grant of more
// (INVALID_ARGUMENT), whose token every authentication would refuse, and
// issues one of exactly that many, whose token authenticates. Before, a
// grant of any number of roles that fitted in its token was issued, and
// its principal carried them all.
func TestGrantOfMoreRolesThanAPrincipalCarriesRefusedAtIssue(t *testing.T) {
	f := accessFixture(t)
	_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: rolesOf(pigeon.MaxPrincipalRoles)})
	require.NoError(t, err)

	_, err = f.e.IssueGrant(ctx, carol, rolesOf(pigeon.MaxPrincipalRoles+1), time.Hour)
	requireCode(t, err, pigeon.CodeInvalidArgument)

	g, err := f.e.IssueGrant(ctx, carol, rolesOf(pigeon.MaxPrincipalRoles), time.Hour)
	require.NoError(t, err, "a grant of as many roles as a principal carries")
	p, err := f.e.Authenticate(ctx, g.Token)
	require.NoError(t, err)
	require.Len(t, p.Roles, pigeon.MaxPrincipalRoles)
}

// The principal a grant token yields is held to the bounds of every
// authenticator's principal (checkPrincipal), whether the engine verifies
// the token itself (its Authenticator is no CredentialAuthenticator) or an
// identity chain does through GrantTokens: a grant record that an earlier
// broker, or a writer behind the broker's back, left with more roles than
// a principal carries, whose account holds them all, is refused
// UNAUTHENTICATED and audited as a refused credential. Before, a token the
// engine verified itself skipped the bounds, and its principal carried
// every role.
func TestGrantPrincipalHeldToTheBoundsAtAuthentication(t *testing.T) {
	// An account holds at most MaxPrincipalRoles roles (CreateAccount),
	// but one stored with more by an earlier broker loads.
	roles, err := json.Marshal(rolesOf(pigeon.MaxPrincipalRoles + 1))
	require.NoError(t, err)
	st := storeOf(t, storedRecord{"accounts", carol, storedAccount(carol, `"roles":`+string(roles))})
	a := accessFixture(t, func(o *pigeon.Options) { o.Store = st })
	g, err := a.e.IssueGrant(ctx, carol, rolesOf(1), time.Hour)
	require.NoError(t, err)

	raw, err := st.Get(ctx, "grants", g.JTI)
	require.NoError(t, err)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(raw, &rec))
	rec["roles"] = rolesOf(pigeon.MaxPrincipalRoles + 1)
	raw, err = json.Marshal(rec)
	require.NoError(t, err)
	require.NoError(t, st.Put(ctx, "grants", g.JTI, raw))

	for _, kind := range []string{"engine", "CredentialAuthenticator"} {
		t.Run(kind, func(t *testing.T) {
			b := accessFixture(t, func(o *pigeon.Options) {
				o.Store = st
				if kind == "CredentialAuthenticator" {
					o.Authenticator = grantsOnly{}
				}
			})
			before := auditCount(t, b.e, pigeon.EventAuthFailed, pigeon.CodeUnauthenticated)
			p, err := b.e.Authenticate(ctx, g.Token)
			requireCode(t, err, pigeon.CodeUnauthenticated)
			require.Nil(t, p)
			require.Equal(t, before+1, auditCount(t, b.e, pigeon.EventAuthFailed, pigeon.CodeUnauthenticated))
			_, err = b.e.Connect(ctx, g.Token, []string{"rooms.chat"})
			requireCode(t, err, pigeon.CodeUnauthenticated)
		})
	}
}
