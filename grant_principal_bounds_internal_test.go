package pigeon

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// A grant token's principal takes its account's attributes, and is held
// to the bounds of every principal (checkPrincipal) with them: an account
// the directory holds with an attribute that holds a control or
// formatting character, or with more than MaxAccountAttributes of them,
// yields no principal (UNAUTHENTICATED). CreateAccount and load refuse
// such an account; this puts one in the directory's maps past them, as a
// path that skipped their checks would. Before, the engine verifying a
// grant token itself took the account's attributes as they were.
func TestGrantPrincipalTakesNoAttributeOverTheBounds(t *testing.T) {
	ctx := context.Background()
	many := make(map[string]string, MaxAccountAttributes+1)
	for i := range MaxAccountAttributes + 1 {
		many["a"+strconv.Itoa(i)] = "v"
	}
	cases := []struct {
		name  string
		attrs map[string]string
	}{
		{"ESC in a value", map[string]string{"team": "a\x1b[2Jb"}},
		{"U+202E in a name", map[string]string{"te\u202eam": "payments"}},
		{"a value not UTF-8", map[string]string{"team": "pay\xff"}},
		{"one attribute too many", many},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(ctx, nil)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, e.Shutdown(ctx)) })
			_, err = e.CreateAccount(ctx, Account{ID: "carol", Roles: []string{"member"}})
			require.NoError(t, err)
			g, err := e.IssueGrant(ctx, "carol", []string{"member"}, 0)
			require.NoError(t, err)
			p, err := e.Authenticate(ctx, g.Token)
			require.NoError(t, err, "the account as CreateAccount stored it")
			require.Equal(t, []string{"member"}, p.Roles)

			unlock := e.dir.lockChange()
			a := cloneAccount(e.dir.accounts["carol"])
			a.Attributes = tc.attrs
			e.dir.accounts["carol"] = &a
			e.dir.bump()
			unlock()

			p, err = e.Authenticate(ctx, g.Token)
			require.Equal(t, CodeUnauthenticated, ErrorCode(err))
			require.Nil(t, p)
		})
	}
}
