package pigeon

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The broker gives internal/cond's plain compile errors their decision
// code; the CEL texts themselves are tested in internal/cond.
func TestCompileConditionCode(t *testing.T) {
	for _, expr := range []string{"", "principal.id == 1", "message.region", "message.region == "} {
		_, err := compileCondition(expr)
		require.Error(t, err, expr)
		require.Equal(t, CodePolicyInvalid, ErrorCode(err), expr)
		require.ErrorIs(t, err, ErrInvalid, expr)
		require.NotContains(t, err.Error(), "\n", "issues are rendered on one line")
	}
	_, err := compileCondition("principal.id == 1")
	require.EqualError(t, err, "pigeon: POLICY_INVALID: CEL: 1:14: found no matching overload for '_==_' applied to '(string, int)'")

	c, err := compileCondition(`message.data.amount < 10 && "writer" in principal.roles`)
	require.NoError(t, err)
	v := condVars(&Principal{ID: "p", Roles: []string{"writer"}}, &Message{ID: "m"}, map[string]any{"amount": 5.0})
	ok, err := c.Eval(&v)
	require.NoError(t, err)
	require.True(t, ok)
}
