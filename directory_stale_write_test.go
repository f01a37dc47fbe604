package pigeon_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
)

// newUntoldPair is two nodes on one memory store: b hears of a's
// directory changes only when the test announces them, so that a change
// on b meets a store a changed since b last read it.
func newUntoldPair(t *testing.T) *nodePair {
	t.Helper()
	return startNodePair(t, accessFixtureOptions, func(h *hub, view nodeStore) (store.Store, pigeon.Cluster) {
		return view, h.node()
	})
}

// tell announces a's changes to b (and, with both, b's to a) and waits
// until b's accounts and roles are a's.
func tell(t *testing.T, p *nodePair, both ...bool) {
	t.Helper()
	if len(both) > 0 && both[0] {
		p.h.broadcast(nil, pigeon.ClusterChange{Kind: pigeon.ChangeDirectory})
	} else {
		p.announce()
	}
	require.Eventually(t, func() bool {
		return equalJSON(p.a.ListAccounts(ctx), p.b.ListAccounts(ctx)) && equalJSON(p.a.ListRoles(ctx), p.b.ListRoles(ctx))
	}, 10*time.Second, 5*time.Millisecond, "b did not apply a's changes")
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// accountInStore reads account id from st as the directory keeps it; ok is
// false when st holds none.
func accountInStore(t *testing.T, st store.KV, id string) (a pigeon.Account, ok bool) {
	t.Helper()
	b, err := st.Get(ctx, "accounts", id)
	if errors.Is(err, store.ErrNotFound) {
		return pigeon.Account{}, false
	}
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &a))
	return a, true
}

// grantRolesInStore reads the roles of grant jti from st; ok is false when
// st holds no record of it.
func grantRolesInStore(t *testing.T, st store.KV, jti string) (roles []string, ok bool) {
	t.Helper()
	b, err := st.Get(ctx, "grants", jti)
	if errors.Is(err, store.ErrNotFound) {
		return nil, false
	}
	require.NoError(t, err)
	var g struct {
		Roles []string `json:"roles"`
	}
	require.NoError(t, json.Unmarshal(b, &g))
	return g.Roles, true
}

// chatRoles defines member and extra on e, each of which lets its holder
// publish on rooms.chat.
func chatRoles(t *testing.T, e *pigeon.Engine) {
	t.Helper()
	for _, name := range []string{"member", "extra"} {
		_, err := e.PutRole(ctx, pigeon.Role{Name: name, Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish}}}})
		require.NoError(t, err)
	}
}

// TestDirectoryStaleNodeChangeUndoesNothing: node a changes the directory
// and node b, not yet told, changes the same record from its own copy.
// Before, b wrote the whole record from that copy: it gave back the role
// a removed, wrote back the account a deleted, and stored a grant with a
// role its account no longer held. Now b's write is made only if the
// store still holds what b's copy says; otherwise b reads the directory
// again and makes its change on what it read: the change a made stays.
func TestDirectoryStaleNodeChangeUndoesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		// roles are carol's roles before onA (member and extra when nil).
		roles []string
		// onA is a's change, which b is not told of.
		onA func(t *testing.T, p *nodePair)
		// onB is b's change, made from its copy of before onA.
		onB func(t *testing.T, p *nodePair) error
		// code is what onB returns (CodeOK: it succeeds).
		code pigeon.Code
		// check checks the store afterwards.
		check func(t *testing.T, p *nodePair)
	}{
		{
			name:  "a role given on a node not told of another role's removal",
			roles: []string{"member"},
			onA: func(t *testing.T, p *nodePair) {
				_, err := p.a.RemoveAccountRole(ctx, carol, "member")
				require.NoError(t, err)
			},
			onB: func(t *testing.T, p *nodePair) error {
				a, err := p.b.AddAccountRole(ctx, carol, "extra")
				if err == nil {
					require.Equal(t, []string{"extra"}, a.Roles, "b answers with the account as stored")
				}
				return err
			},
			code: pigeon.CodeOK,
			check: func(t *testing.T, p *nodePair) {
				a, ok := accountInStore(t, p.shared, carol)
				require.True(t, ok)
				require.Equal(t, []string{"extra"}, a.Roles, "the removal was undone")
			},
		},
		{
			name: "keys put on a node not told of a role's removal",
			onA: func(t *testing.T, p *nodePair) {
				_, err := p.a.RemoveAccountRole(ctx, carol, "member")
				require.NoError(t, err)
			},
			onB: func(t *testing.T, p *nodePair) error {
				_, err := p.b.PutAccountKeys(ctx, carol, nil)
				return err
			},
			code: pigeon.CodeOK,
			check: func(t *testing.T, p *nodePair) {
				a, ok := accountInStore(t, p.shared, carol)
				require.True(t, ok)
				require.Equal(t, []string{"extra"}, a.Roles, "the removal was undone")
			},
		},
		{
			name: "a role removed from an account deleted elsewhere",
			onA: func(t *testing.T, p *nodePair) {
				require.NoError(t, p.a.DeleteAccount(ctx, carol))
			},
			onB: func(t *testing.T, p *nodePair) error {
				_, err := p.b.RemoveAccountRole(ctx, carol, "member")
				return err
			},
			code: pigeon.CodeNotFound,
			check: func(t *testing.T, p *nodePair) {
				_, ok := accountInStore(t, p.shared, carol)
				require.False(t, ok, "the deleted account was written back")
			},
		},
		{
			name: "an account created on two nodes",
			onA: func(t *testing.T, p *nodePair) {
				_, err := p.a.CreateAccount(ctx, pigeon.Account{ID: dave, Roles: []string{"member"}})
				require.NoError(t, err)
			},
			onB: func(t *testing.T, p *nodePair) error {
				_, err := p.b.CreateAccount(ctx, pigeon.Account{ID: dave, Roles: []string{"extra"}})
				return err
			},
			code: pigeon.CodeConflict,
			check: func(t *testing.T, p *nodePair) {
				a, ok := accountInStore(t, p.shared, dave)
				require.True(t, ok)
				require.Equal(t, []string{"member"}, a.Roles, "the account a created was replaced")
			},
		},
		{
			name: "a grant issued on a node not told of its role's removal",
			onA: func(t *testing.T, p *nodePair) {
				_, err := p.a.RemoveAccountRole(ctx, carol, "extra")
				require.NoError(t, err)
			},
			onB: func(t *testing.T, p *nodePair) error {
				g, err := p.b.IssueGrant(ctx, carol, []string{"member", "extra"}, time.Hour)
				if err == nil {
					roles, ok := grantRolesInStore(t, p.shared, g.JTI)
					require.True(t, ok)
					require.Equal(t, []string{"member"}, roles, "the grant carries a role its account no longer holds")
				}
				return err
			},
			code: pigeon.CodeOK,
		},
		{
			name: "a role deleted on a node not told of its redefinition",
			onA: func(t *testing.T, p *nodePair) {
				_, err := p.a.PutRole(ctx, pigeon.Role{Name: "extra", Permissions: []pigeon.Permission{}})
				require.NoError(t, err)
			},
			onB:  func(t *testing.T, p *nodePair) error { return p.b.DeleteRole(ctx, "extra") },
			code: pigeon.CodeOK,
			check: func(t *testing.T, p *nodePair) {
				_, err := p.shared.Get(ctx, "roles", "extra")
				require.ErrorIs(t, err, store.ErrNotFound)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newUntoldPair(t)
			chatRoles(t, p.a)
			roles := tc.roles
			if roles == nil {
				roles = []string{"member", "extra"}
			}
			_, err := p.a.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: roles})
			require.NoError(t, err)
			tell(t, p)

			tc.onA(t, p)
			err = tc.onB(t, p)
			if tc.code == pigeon.CodeOK {
				require.NoError(t, err)
			} else {
				requireCode(t, err, tc.code)
			}
			if tc.check != nil {
				tc.check(t, p)
			}
			// Told at last, both nodes agree.
			tell(t, p, true)
		})
	}
}

// TestDirectoryStaleNodeRevivesNoRevokedGrant: node a revokes a grant,
// then deletes its account, which forgets the grant; node b, not yet told
// of either, takes from the account a role the grant carries. Before, b
// wrote the grant back narrowed, without its revocation, and the account
// back as b held it: a node that read the store afterwards took the
// revoked grant's token, connected and published. Now b's writes find
// the store changed: b reads the directory again and answers NOT_FOUND,
// and the token is refused everywhere.
func TestDirectoryStaleNodeRevivesNoRevokedGrant(t *testing.T) {
	p := newUntoldPair(t)
	chatRoles(t, p.a)
	_, err := p.a.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member", "extra"}})
	require.NoError(t, err)
	g, err := p.a.IssueGrant(ctx, carol, []string{"member", "extra"}, time.Hour)
	require.NoError(t, err)
	tell(t, p)
	require.NoError(t, connectEventually(t, p.b, g.Token).Close(ctx))

	require.NoError(t, p.a.RevokeGrant(ctx, g.JTI))
	require.NoError(t, p.a.DeleteAccount(ctx, carol))
	_, removed := p.b.RemoveAccountRole(ctx, carol, "extra")

	o := accessFixtureOptions()
	o.Store = viewOf(p.shared)
	fresh := startEngine(t, o)
	s, err := fresh.Connect(ctx, g.Token, []string{"rooms.chat"})
	if err == nil {
		_, perr := s.Publish(ctx, chatIn("lobby", "revoked"))
		require.Failf(t, "a node that read the store took the revoked grant's token", "publish: %v", perr)
	}
	requireCode(t, err, pigeon.CodeUnauthenticated)

	_, ok := grantRolesInStore(t, p.shared, g.JTI)
	require.False(t, ok, "the forgotten grant was written back")
	_, ok = accountInStore(t, p.shared, carol)
	require.False(t, ok, "the deleted account was written back")
	requireCode(t, removed, pigeon.CodeNotFound)
}

// TestDeletedAccountKeepsGrantRevocations: deleting an account forgets
// its grants but keeps the revocations of those it revoked, until they
// expire (the retention pass forgets them then): a grant record that
// comes back by any path (a store written behind the broker's back, a
// write of a node that cannot compare what it replaces) is still refused,
// whatever its account. Before, the revocation went with the record.
func TestDeletedAccountKeepsGrantRevocations(t *testing.T) {
	shared := memory.New(nil)
	o := accessFixtureOptions()
	o.Store = viewOf(shared)
	e := startEngine(t, o)
	chatRoles(t, e)
	_, err := e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
	require.NoError(t, err)
	g, err := e.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
	require.NoError(t, err)
	grant, err := shared.Get(ctx, "grants", g.JTI)
	require.NoError(t, err)
	account, err := shared.Get(ctx, "accounts", carol)
	require.NoError(t, err)
	require.NoError(t, e.RevokeGrant(ctx, g.JTI))
	require.NoError(t, e.DeleteAccount(ctx, carol))

	_, err = shared.Get(ctx, "grants.revoked", g.JTI)
	require.NoError(t, err, "the revocation went with the account")
	_, ok := grantRolesInStore(t, shared, g.JTI)
	require.False(t, ok)

	// The grant and its account come back as they were before the
	// revocation: the token is refused for the revocation alone.
	require.NoError(t, shared.Put(ctx, "grants", g.JTI, grant))
	require.NoError(t, shared.Put(ctx, "accounts", carol, account))
	o = accessFixtureOptions()
	o.Store = viewOf(shared)
	fresh := startEngine(t, o)
	_, err = fresh.Authenticate(ctx, g.Token)
	requireCode(t, err, pigeon.CodeUnauthenticated)
	_, err = fresh.Connect(ctx, g.Token, []string{"rooms.chat"})
	requireCode(t, err, pigeon.CodeUnauthenticated)
}

// blindStore is a store without store.KVSwapper (nor store.KVCreator):
// a third party's, whose writes the directory cannot make conditional.
type blindStore struct{ store.Store }

// TestDirectoryChangesOnOneNode: on one node, every change of the
// directory answers, and stores, the same whether the store can swap a
// record (memory) or not (a third party's): the check that the store
// still holds what the node's copy says costs a read, and changes
// nothing a caller sees.
func TestDirectoryChangesOnOneNode(t *testing.T) {
	run := func(t *testing.T, st store.Store) (answers []string, stored map[string]map[string][]byte) {
		o := accessFixtureOptions()
		o.Store = st
		e := startEngine(t, o)
		note := func(v any, err error) {
			t.Helper()
			require.NoError(t, err)
			b, _ := json.Marshal(v)
			answers = append(answers, string(b))
		}
		chatRoles(t, e)
		note(e.PutRole(ctx, pigeon.Role{Name: "member", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish, pigeon.OpReceive}}}}))
		note(e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}, Attributes: map[string]string{"team": "a", "tier": "b"}}))
		note(e.CreateAccount(ctx, pigeon.Account{ID: dave}))
		note(e.AddAccountRole(ctx, carol, "extra"))
		g, err := e.IssueGrant(ctx, carol, []string{"member", "extra"}, time.Hour)
		require.NoError(t, err)
		spare, err := e.IssueGrant(ctx, dave, []string{"member"}, time.Hour)
		require.NoError(t, err)
		note(e.RemoveAccountRole(ctx, carol, "extra"))
		note(e.PutAccountKeys(ctx, carol, nil))
		require.NoError(t, e.RevokeGrant(ctx, g.JTI))
		require.NoError(t, e.RevokeGrant(ctx, g.JTI), "revoking twice")
		s, err := e.Connect(ctx, "carol-token", []string{"rooms.chat"})
		require.NoError(t, err)
		_, err = s.Publish(ctx, chatIn("lobby", "hello"))
		require.NoError(t, err)
		require.NoError(t, s.Close(ctx))
		require.NoError(t, e.DeleteRole(ctx, "extra"))
		requireCode(t, e.DeleteRole(ctx, "extra"), pigeon.CodeNotFound)
		require.NoError(t, e.DeleteAccount(ctx, carol))
		requireCode(t, e.DeleteAccount(ctx, carol), pigeon.CodeNotFound)
		_, err = e.RemoveAccountRole(ctx, carol, "member")
		requireCode(t, err, pigeon.CodeNotFound)
		note(e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}}))
		_, err = e.Authenticate(ctx, g.Token)
		requireCode(t, err, pigeon.CodeUnauthenticated)
		_, err = e.Authenticate(ctx, spare.Token)
		require.NoError(t, err)
		note(e.ListAccounts(ctx), nil)
		note(e.ListRoles(ctx), nil)

		stored = map[string]map[string][]byte{}
		for _, b := range []string{"accounts", "roles", "grants", "grants.revoked"} {
			kv, err := st.List(ctx, b)
			require.NoError(t, err)
			stored[b] = map[string][]byte{}
			for k, v := range kv {
				if b == "grants" || b == "grants.revoked" {
					k = "jti" // issued at random
					v = nil
				}
				stored[b][k] = v
			}
		}
		return answers, stored
	}
	var _ store.KVSwapper = memory.New(nil)
	swapAnswers, swapStored := run(t, memory.New(nil))
	blindAnswers, blindStored := run(t, blindStore{memory.New(nil)})
	require.Equal(t, len(swapAnswers), len(blindAnswers))
	for i := range swapAnswers {
		require.JSONEq(t, scrubTimes(t, swapAnswers[i]), scrubTimes(t, blindAnswers[i]), "answer %d", i)
	}
	require.Equal(t, len(swapStored["accounts"]), len(blindStored["accounts"]))
	require.Equal(t, swapStored["roles"], blindStored["roles"])
	require.Equal(t, len(swapStored["grants"]), len(blindStored["grants"]))
	require.Equal(t, len(swapStored["grants.revoked"]), len(blindStored["grants.revoked"]))
}

// scrubTimes blanks the createdAt of the accounts in JSON text s: the two
// runs create them at different moments.
func scrubTimes(t *testing.T, s string) string {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal([]byte(s), &v))
	var scrub func(v any)
	scrub = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if _, ok := x["createdAt"]; ok {
				x["createdAt"] = ""
			}
			for _, e := range x {
				scrub(e)
			}
		case []any:
			for _, e := range x {
				scrub(e)
			}
		}
	}
	scrub(v)
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
