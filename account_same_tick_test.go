package pigeon_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// An account deleted and created again under the same id within one tick
// of the clock (a coarse clock, a frozen test clock, or two calls in the
// same nanosecond) is still another account: a contract negotiated under
// the first ends, whichever credential negotiated it. Before, the two had
// the same CreatedAt, by which a contract tells its account from a later
// one of the same id, and a contract of a static token went on under the
// second account as if the first had never been deleted.
func TestAccountCreatedAgainInTheSameTickIsAnotherAccount(t *testing.T) {
	for _, tc := range []struct {
		name       string
		credential func(t *testing.T, e *pigeon.Engine) string
	}{
		{"a static token", func(*testing.T, *pigeon.Engine) string { return "carol-token" }},
		{"a grant", func(t *testing.T, e *pigeon.Engine) string {
			g, err := e.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
			require.NoError(t, err)
			return g.Token
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock() // frozen: every call reads the same instant
			e := accessFixture(t, func(o *pigeon.Options) { o.Now = clk.Now }).e
			_, err := e.PutRole(ctx, pigeon.Role{Name: "member", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish}}}})
			require.NoError(t, err)
			first, err := e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
			require.NoError(t, err)
			s, err := e.Connect(ctx, tc.credential(t, e), []string{"rooms.chat"})
			require.NoError(t, err)
			defer s.Close(ctx)
			_, err = s.Publish(ctx, chatIn("lobby", "first"))
			require.NoError(t, err)

			require.NoError(t, e.DeleteAccount(ctx, carol))
			second, err := e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
			require.NoError(t, err)
			require.True(t, second.CreatedAt.After(first.CreatedAt), "a later account is created after an earlier one, whatever the clock says")

			_, err = s.Publish(ctx, chatIn("lobby", "still here?"))
			requireCode(t, err, pigeon.CodeGrantRevoked)
			again, err := e.Connect(ctx, "carol-token", []string{"rooms.chat"})
			require.NoError(t, err, "the second account negotiates afresh")
			defer again.Close(ctx)
			_, err = again.Publish(ctx, chatIn("lobby", "second"))
			require.NoError(t, err)
		})
	}
}
