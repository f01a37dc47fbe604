package jetstream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
)

// TestDirectoryStaleNodeRevivesNoRevokedGrant: node a revokes a grant,
// then deletes its account, which forgets the grant; node b, which has
// not applied either (it has no Cluster: a node whose watch has not
// delivered them yet), takes from the account a role the grant carries.
// Before, b wrote the grant back narrowed, without its revocation, and
// the account back as b held it: a node that loaded the directory
// afterwards took the revoked grant's token, connected and published.
// Now every record b writes is swapped by revision from what b read: b
// finds the account gone, reads the directory again and answers
// NOT_FOUND, and the token is refused everywhere.
func TestDirectoryStaleNodeRevivesNoRevokedGrant(t *testing.T) {
	srv := runServer(t)
	prefix := freshPrefix()
	ctx := t.Context()
	a := localNode(t, srv.ClientURL(), prefix, "a", true)
	for _, name := range []string{"member", "extra"} {
		_, err := a.e.PutRole(ctx, pigeon.Role{Name: name, Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish}}}})
		require.NoError(t, err)
	}
	_, err := a.e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member", "extra"}})
	require.NoError(t, err)
	g, err := a.e.IssueGrant(ctx, carol, []string{"member", "extra"}, time.Hour)
	require.NoError(t, err)
	b := localNode(t, srv.ClientURL(), prefix, "b", false)
	s, err := b.e.Connect(ctx, g.Token, []string{"rooms.chat"})
	require.NoError(t, err, "b loaded the grant")
	require.NoError(t, s.Close(ctx))

	require.NoError(t, a.e.RevokeGrant(ctx, g.JTI))
	require.NoError(t, a.e.DeleteAccount(ctx, carol))
	_, removed := b.e.RemoveAccountRole(ctx, carol, "extra")

	fresh := localNode(t, srv.ClientURL(), prefix, "c", true)
	s, err = fresh.e.Connect(ctx, g.Token, []string{"rooms.chat"})
	if err == nil {
		_, perr := s.Publish(ctx, roomMsg("lobby"))
		require.Failf(t, "a node that loaded the directory took the revoked grant's token", "publish: %v", perr)
	}
	requireCode(t, err, pigeon.CodeUnauthenticated)
	_, err = a.s.Get(ctx, "grants", g.JTI)
	require.ErrorIs(t, err, store.ErrNotFound, "the forgotten grant was written back")
	_, err = a.s.Get(ctx, "accounts", carol)
	require.ErrorIs(t, err, store.ErrNotFound, "the deleted account was written back")
	_, err = a.s.Get(ctx, "grants.revoked", g.JTI)
	require.NoError(t, err, "the revocation stays while the grant lives")
	requireCode(t, removed, pigeon.CodeNotFound)
}
