package pigeon_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A grant carries only roles its account held when it was issued and has
// held since: a role taken from the account is gone from the grant for
// good, and giving the account the role (back) later gives it to the
// grants issued from then on, not to older ones. Before, a grant counted
// any of its roles the account held at the check, so taking a role away to
// cut off a program's token and later giving it to the account again (or
// giving the account a role an old grant had asked for) armed the old token
// again, with no new grant issued.
func TestGrantDoesNotRegainARole(t *testing.T) {
	cases := []struct {
		name string
		// held are the account's roles when the grant is issued; then
		// runs after the grant is issued.
		held []string
		then func(t *testing.T, e *pigeon.Engine)
	}{
		{"a role taken away and given back", []string{"member"}, func(t *testing.T, e *pigeon.Engine) {
			_, err := e.RemoveAccountRole(ctx, carol, "member")
			require.NoError(t, err)
			_, err = e.AddAccountRole(ctx, carol, "member")
			require.NoError(t, err)
		}},
		{"a role the account did not hold at issue, given since", nil, func(t *testing.T, e *pigeon.Engine) {
			_, err := e.AddAccountRole(ctx, carol, "member")
			require.NoError(t, err)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := accessFixture(t)
			e := f.e
			_, err := e.PutRole(ctx, pigeon.Role{Name: "member", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish}}}})
			require.NoError(t, err)
			_, err = e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: tc.held})
			require.NoError(t, err)
			old, err := e.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
			require.NoError(t, err)
			tc.then(t, e)

			p, err := e.Authenticate(ctx, old.Token)
			require.NoError(t, err)
			require.Empty(t, p.Roles, "the old grant does not regain the role")
			_, err = e.Connect(ctx, old.Token, []string{"rooms.chat"})
			requireCode(t, err, pigeon.CodeNoPermittedSubjects)

			fresh, err := e.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
			require.NoError(t, err)
			p, err = e.Authenticate(ctx, fresh.Token)
			require.NoError(t, err)
			require.Equal(t, []string{"member"}, p.Roles, "a grant issued since carries it")
			s, err := e.Connect(ctx, fresh.Token, []string{"rooms.chat"})
			require.NoError(t, err)
			defer s.Close(ctx)
			_, err = s.Publish(ctx, chatIn("lobby", "hi"))
			require.NoError(t, err)
		})
	}
}

// A role taken from the account narrows its grants in the store too: after
// a restart the role, given back, is not the old grant's either.
func TestGrantDoesNotRegainARoleAfterRestart(t *testing.T) {
	dir := t.TempDir()
	e, st := openDurable(t, dir, nil)
	_, err := e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member", "reader"}})
	require.NoError(t, err)
	g, err := e.IssueGrant(ctx, carol, []string{"member", "reader"}, time.Hour)
	require.NoError(t, err)
	_, err = e.RemoveAccountRole(ctx, carol, "member")
	require.NoError(t, err)
	closeDurable(t, e, st)

	e, st = openDurable(t, dir, nil)
	defer closeDurable(t, e, st)
	_, err = e.AddAccountRole(ctx, carol, "member")
	require.NoError(t, err)
	p, err := e.Authenticate(ctx, g.Token)
	require.NoError(t, err)
	require.Equal(t, []string{"reader"}, p.Roles)
}
