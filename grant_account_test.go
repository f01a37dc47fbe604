package pigeon_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store/memory"
)

// A grant belongs to the account it was issued to, not to its id: once the
// account is deleted, an account created again under the same id gets
// nothing from its predecessor's grants, however long they had to run.
// Before, they came back to life with the new account's roles.
func TestGrantsDieWithTheirAccount(t *testing.T) {
	st := memory.New(nil)
	f := accessFixture(t, func(o *pigeon.Options) { o.Store = st })
	e := f.e
	_, err := e.PutRole(ctx, pigeon.Role{Name: "member", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish}}}})
	require.NoError(t, err)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
	require.NoError(t, err)
	old, err := e.IssueGrant(ctx, carol, []string{"member"}, 24*time.Hour)
	require.NoError(t, err)
	s, err := e.Connect(ctx, old.Token, []string{"rooms.chat"})
	require.NoError(t, err)
	defer s.Close(ctx)

	require.NoError(t, e.DeleteAccount(ctx, carol))
	grants, err := st.List(ctx, "grants")
	require.NoError(t, err)
	require.Empty(t, grants, "the account's grants are deleted with it")
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
	require.NoError(t, err)

	_, err = e.Authenticate(ctx, old.Token)
	requireCode(t, err, pigeon.CodeUnauthenticated)
	_, err = s.Publish(ctx, chatIn("lobby", "still here?"))
	requireCode(t, err, pigeon.CodeGrantRevoked)
	_, err = e.Connect(ctx, old.Token, []string{"rooms.chat"})
	requireCode(t, err, pigeon.CodeUnauthenticated)

	fresh, err := e.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
	require.NoError(t, err)
	p, err := e.Authenticate(ctx, fresh.Token)
	require.NoError(t, err, "the new account's own grants work")
	require.Equal(t, []string{"member"}, p.Roles)
}

// Expired grants, and the revocations of grants, are forgotten by
// retention an hour after they expire, so the store does not keep every
// grant ever issued; what is still valid stays, and stays revoked.
func TestExpiredGrantsAreForgotten(t *testing.T) {
	st := memory.New(nil)
	clk := newClock()
	f := accessFixture(t, func(o *pigeon.Options) {
		o.Store = st
		o.Now = clk.Now
		o.SweepInterval = 5 * time.Millisecond
	})
	e := f.e
	_, err := e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
	require.NoError(t, err)
	issue := func(ttl time.Duration, revoke bool) pigeon.GrantToken {
		g, err := e.IssueGrant(ctx, carol, []string{"member"}, ttl)
		require.NoError(t, err)
		if revoke {
			require.NoError(t, e.RevokeGrant(ctx, g.JTI))
		}
		return g
	}
	short, shortRevoked := issue(time.Minute, false), issue(time.Minute, true)
	long, longRevoked := issue(24*time.Hour, false), issue(24*time.Hour, true)
	keys := func(bucket string) []string {
		kv, err := st.List(ctx, bucket)
		require.NoError(t, err)
		var out []string
		for k := range kv {
			out = append(out, k)
		}
		return out
	}
	require.Len(t, keys("grants"), 4)
	require.Len(t, keys("grants.revoked"), 2)

	clk.Advance(30 * time.Minute) // expired, but not an hour ago
	e.EnforceRetention(ctx)       // a pass at that time has run
	require.Len(t, keys("grants"), 4, "kept within the grace")
	clk.Advance(time.Hour)
	require.Eventually(t, func() bool { return len(keys("grants")) == 2 }, 30*time.Second, 5*time.Millisecond)
	require.ElementsMatch(t, []string{long.JTI, longRevoked.JTI}, keys("grants"))
	require.Equal(t, []string{longRevoked.JTI}, keys("grants.revoked"))
	for _, g := range []pigeon.GrantToken{short, shortRevoked, longRevoked} {
		_, err := e.Authenticate(ctx, g.Token)
		requireCode(t, err, pigeon.CodeUnauthenticated)
		requireCode(t, e.RevokeGrant(ctx, short.JTI), pigeon.CodeNotFound)
	}
	p, err := e.Authenticate(ctx, long.Token)
	require.NoError(t, err)
	require.Equal(t, carol, p.ID)
}

// TestNegotiateTakesTheCredentialAsItIsNow: a principal negotiates with
// the roles its credential is worth when it negotiates, not when it
// authenticated (a WebSocket connection negotiates again on the principal
// of its upgrade): a role taken away since is not in the new contract, a
// role given since is, and a grant revoked since is GRANT_REVOKED, audited,
// with no contract issued.
func TestNegotiateTakesTheCredentialAsItIsNow(t *testing.T) {
	f := accessFixture(t)
	e := f.e
	for _, r := range []pigeon.Role{
		{Name: "writer", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish}}}},
		{Name: "reader", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpReceive}}}},
	} {
		_, err := e.PutRole(ctx, r)
		require.NoError(t, err)
	}
	_, err := e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"writer", "reader"}})
	require.NoError(t, err)
	g, err := e.IssueGrant(ctx, carol, []string{"writer", "reader"}, time.Hour)
	require.NoError(t, err)
	p, err := e.Authenticate(ctx, g.Token)
	require.NoError(t, err)
	k, err := e.Negotiate(ctx, p, "", []string{"rooms.chat"}, 0)
	require.NoError(t, err)
	require.True(t, k.Allows("rooms.chat", pigeon.OpPublish))
	require.True(t, k.Allows("rooms.chat", pigeon.OpReceive))

	_, err = e.RemoveAccountRole(ctx, carol, "writer")
	require.NoError(t, err)
	k, err = e.Negotiate(ctx, p, "", []string{"rooms.chat"}, 0)
	require.NoError(t, err, "the principal of before")
	require.False(t, k.Allows("rooms.chat", pigeon.OpPublish), "a role taken away since is not negotiated")
	require.True(t, k.Allows("rooms.chat", pigeon.OpReceive))
	require.Equal(t, []string{"reader"}, k.Info().Roles)
	_, err = e.Publish(ctx, pigeon.Caller{Principal: p, ContractID: k.ID()}, chatIn("lobby", "hi"))
	requireCode(t, err, pigeon.CodeOperationNotInContract)

	require.NoError(t, e.RevokeGrant(ctx, g.JTI))
	before, err := e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	_, err = e.Negotiate(ctx, p, "", []string{"rooms.chat"}, 0)
	requireCode(t, err, pigeon.CodeGrantRevoked)
	after, err := e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	last := after[len(after)-1]
	require.Len(t, after, len(before)+1)
	require.Equal(t, "contract.denied", last.Type)
	require.Equal(t, string(pigeon.CodeGrantRevoked), last.Code)
	require.Equal(t, carol, last.Principal)

	// A principal built by hand keeps its roles, with its account's.
	hand := &pigeon.Principal{ID: "embedded-service", Roles: []string{"writer"}}
	k, err = e.Negotiate(ctx, hand, "", []string{"rooms.chat"}, 0)
	require.NoError(t, err)
	require.True(t, k.Allows("rooms.chat", pigeon.OpPublish))
}
