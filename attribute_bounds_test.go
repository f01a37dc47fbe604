package pigeon_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// attributesOf returns n attributes "a0".."a(n-1)", each of value v.
func attributesOf(n int, v string) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m["a"+strconv.Itoa(i)] = v
	}
	return m
}

// An account's attributes are bounded: more than MaxAccountAttributes of
// them, a name longer than MaxAttributeNameLength bytes or a value longer
// than MaxAttributeValueLength bytes is refused INVALID_ARGUMENT, and no
// account is created or audited. Before, an admin (or a compromised admin
// token) could store any number of attributes of any length, which the
// directory keeps, every principal of the account carries, and listings,
// the console and policy conditions read. At each bound it is accepted.
func TestCreateAccountBoundsAttributes(t *testing.T) {
	type attrs = map[string]string
	refused := []struct {
		name  string
		attrs attrs
	}{
		{"too many", attributesOf(pigeon.MaxAccountAttributes+1, "x")},
		{"name too long", attrs{strings.Repeat("n", pigeon.MaxAttributeNameLength+1): "x"}},
		{"value too long", attrs{"team": strings.Repeat("v", pigeon.MaxAttributeValueLength+1)}},
		{"value far too long", attrs{"team": strings.Repeat("v", 1<<20)}},
	}
	f := accessFixture(t)
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: "spiffe://chat/frank", Attributes: tc.attrs})
			pe := requireCode(t, err, pigeon.CodeInvalidArgument)
			require.Less(t, len(pe.Error()), 512, "the refusal does not echo the long name or value")
			_, err = f.e.GetAccount(ctx, "spiffe://chat/frank")
			requireCode(t, err, pigeon.CodeNotFound)
		})
	}
	require.Zero(t, auditCount(t, f.e, pigeon.EventAccountCreated, pigeon.CodeOK))

	accepted := []struct {
		name  string
		attrs attrs
	}{
		{"as many as allowed", attributesOf(pigeon.MaxAccountAttributes, "x")},
		{"longest name", attrs{strings.Repeat("n", pigeon.MaxAttributeNameLength): "x"}},
		// Counted in bytes: 512 two-byte characters are the longest value.
		{"longest value", attrs{"team": strings.Repeat("é", pigeon.MaxAttributeValueLength/2)}},
	}
	for i, tc := range accepted {
		t.Run(tc.name, func(t *testing.T) {
			id := "spiffe://chat/ok" + strconv.Itoa(i)
			a, err := f.e.CreateAccount(ctx, pigeon.Account{ID: id, Attributes: tc.attrs})
			require.NoError(t, err)
			require.Equal(t, tc.attrs, a.Attributes)
		})
	}
	require.Equal(t, len(accepted), auditCount(t, f.e, pigeon.EventAccountCreated, pigeon.CodeOK))
}
