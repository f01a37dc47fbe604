package pigeon_test

import (
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A role taken away while a contract is being negotiated either does not
// reach the contract or fails its first check: the contract may not be
// issued with the role and marked current with the directory that no
// longer has it. Before, negotiate read the directory's version after it
// had computed the roles, so a removal in between left a contract holding
// the removed role's operations until the next change of the directory.
// The race is narrow: the test tries it many times.
func TestRoleRemovedDuringNegotiation(t *testing.T) {
	f := accessFixture(t, func(o *pigeon.Options) { o.NegotiateRate = pigeon.RateLimitPolicy{PerSecond: -1} })
	e := f.e
	_, err := e.PutRole(ctx, pigeon.Role{Name: "writer", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish}}}})
	require.NoError(t, err)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: carol})
	require.NoError(t, err)
	p, err := e.Authenticate(ctx, "carol-token")
	require.NoError(t, err)
	for i := 0; i < 2000; i++ {
		_, err := e.AddAccountRole(ctx, carol, "writer")
		require.NoError(t, err)
		var wg sync.WaitGroup
		var c pigeon.Contract
		var nerr error
		wg.Add(2)
		go func() { defer wg.Done(); c, nerr = e.Negotiate(ctx, p, "", []string{"rooms.chat"}, 0) }()
		go func() { defer wg.Done(); _, err := e.RemoveAccountRole(ctx, carol, "writer"); require.NoError(t, err) }()
		wg.Wait()
		if nerr != nil {
			requireCode(t, nerr, pigeon.CodeNoPermittedSubjects)
			continue
		}
		if !slices.Contains(c.Info().Roles, "writer") {
			continue
		}
		_, err = e.Publish(ctx, pigeon.Caller{Principal: p, ContractID: c.ID()}, chatIn("lobby", "after removal"))
		requireCode(t, err, pigeon.CodeGrantRevoked)
		require.NoError(t, e.RevokeContract(ctx, p, c.ID()))
	}
}
