package pigeon_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestAccessTakenAwayWhileTheAuditLogCannotBeWritten: while the audit log
// cannot be written, every directory change that gives access (an
// account, a role given, a role defined or widened, a grant, a key
// added) is refused with the store's code (the audit guard), and every
// change that only takes access away goes on, as a revocation does: a
// role taken from an account, a role deleted or narrowed, a grant
// revoked, an account deleted, a key withdrawn. An
// operator whose disk is full can still take a role from an account that
// should not hold it; the records lost meanwhile are counted in
// audit.resumed once the log is written again.
func TestAccessTakenAwayWhileTheAuditLogCannotBeWritten(t *testing.T) {
	st, e := failingAuditEngine(t, nil)
	_, err := e.PutRole(ctx, pigeon.Role{Name: "reader", Permissions: []pigeon.Permission{}})
	require.NoError(t, err)
	_, err = e.PutRole(ctx, pigeon.Role{Name: "auditor", Permissions: []pigeon.Permission{
		{Subject: "payments.authorize", Operations: []pigeon.Operation{pigeon.OpPublish, pigeon.OpReceive}}}})
	require.NoError(t, err)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member", "reader"}})
	require.NoError(t, err)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: dave})
	require.NoError(t, err)
	k1, k2 := newSigKey(t, "k1"), newSigKey(t, "k2")
	_, err = e.PutAccountKeys(ctx, carol, []pigeon.PublicKey{k1, k2})
	require.NoError(t, err)
	g, err := e.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
	require.NoError(t, err)

	st.fail.Store(true)
	_, err = e.Connect(ctx, "checkout-token", []string{"payments.authorize"})
	requireCode(t, err, pigeon.CodeStoreFull) // the log is found broken
	refused := []struct {
		name string
		op   func() error
	}{
		{"CreateAccount", func() error { _, err := e.CreateAccount(ctx, pigeon.Account{ID: "erin"}); return err }},
		{"AddAccountRole", func() error { _, err := e.AddAccountRole(ctx, carol, "writer"); return err }},
		{"PutRole", func() error {
			_, err := e.PutRole(ctx, pigeon.Role{Name: "writer", Permissions: []pigeon.Permission{}})
			return err
		}},
		{"IssueGrant", func() error { _, err := e.IssueGrant(ctx, carol, []string{"member"}, time.Hour); return err }},
		{"PutRole widening", func() error {
			_, err := e.PutRole(ctx, pigeon.Role{Name: "auditor", Permissions: []pigeon.Permission{
				{Subject: "payments.authorize", Operations: []pigeon.Operation{pigeon.OpPublish, pigeon.OpReceive, pigeon.OpReplay}}}})
			return err
		}},
		{"PutAccountKeys adding", func() error {
			_, err := e.PutAccountKeys(ctx, carol, []pigeon.PublicKey{k1, k2, newSigKey(t, "k3")})
			return err
		}},
	}
	for _, tc := range refused {
		requireCode(t, tc.op(), pigeon.CodeStoreFull)
	}
	taken := []struct {
		name string
		op   func() error
	}{
		{"RemoveAccountRole", func() error { _, err := e.RemoveAccountRole(ctx, carol, "member"); return err }},
		{"DeleteRole", func() error { return e.DeleteRole(ctx, "reader") }},
		{"RevokeGrant", func() error { return e.RevokeGrant(ctx, g.JTI) }},
		{"DeleteAccount", func() error { return e.DeleteAccount(ctx, dave) }},
		{"PutRole narrowing", func() error {
			_, err := e.PutRole(ctx, pigeon.Role{Name: "auditor", Permissions: []pigeon.Permission{
				{Subject: "payments.authorize", Operations: []pigeon.Operation{pigeon.OpReceive}}}})
			return err
		}},
		{"PutAccountKeys removing", func() error { _, err := e.PutAccountKeys(ctx, carol, []pigeon.PublicKey{k1}); return err }},
	}
	for _, tc := range taken {
		require.NoError(t, tc.op(), tc.name)
	}
	a, err := e.GetAccount(ctx, carol)
	require.NoError(t, err)
	require.Equal(t, []string{"reader"}, a.Roles, "the role is taken away")
	require.Equal(t, []pigeon.PublicKey{k1}, a.Keys, "the key is withdrawn")
	r, err := e.GetRole(ctx, "auditor")
	require.NoError(t, err)
	require.Equal(t, []pigeon.Operation{pigeon.OpReceive}, r.Permissions[0].Operations, "the role is narrowed")
	_, err = e.Authenticate(ctx, g.Token)
	requireCode(t, err, pigeon.CodeUnauthenticated)

	st.fail.Store(false)
	_, err = e.AddAccountRole(ctx, carol, "writer")
	require.NoError(t, err, "the first change after the log is written again goes on")
	resumed := auditOf(t, e, pigeon.EventAuditResumed)
	require.Len(t, resumed, 1)
	require.Regexp(t, `^[1-9][0-9]* records could not be written$`, resumed[0].Ref)
	require.Empty(t, auditOf(t, e, pigeon.EventAccountRoleRemoved), "its record was lost with the log")
}
