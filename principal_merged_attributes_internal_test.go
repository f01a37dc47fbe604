package pigeon

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// attrsNamed is n attributes named prefix0, prefix1, … of value v.
func attrsNamed(prefix string, n int, v string) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[prefix+strconv.Itoa(i)] = v
	}
	return m
}

// TestMergedAttributesHeldToTheBound: a credential's attributes and its
// account's are each within an account's bounds, but laid one over the
// other they may hold up to 2 × MaxAccountAttributes, and the account may
// be created, with its attributes, after the credential was made. The
// principal merged with its account is refused UNAUTHENTICATED when the
// merged set is over MaxAccountAttributes (the refusal quotes no value);
// one at the bound, names the two share counted once, is taken. Before,
// the merged principal carried every attribute of both.
func TestMergedAttributesHeldToTheBound(t *testing.T) {
	ctx := context.Background()
	value := strings.Repeat("v", MaxAttributeValueLength)
	cases := []struct {
		name         string
		cred, acct   map[string]string
		refused      bool
		wantAttrsLen int
	}{
		{"both full, no name shared", attrsNamed("c", MaxAccountAttributes, value), attrsNamed("a", MaxAccountAttributes, value), true, 0},
		{"one over, by one account attribute", attrsNamed("c", MaxAccountAttributes, value), map[string]string{"team": "payments"}, true, 0},
		{"both full, every name shared", attrsNamed("c", MaxAccountAttributes, value), attrsNamed("c", MaxAccountAttributes, "x"), false, MaxAccountAttributes},
		{"half and half", attrsNamed("c", MaxAccountAttributes/2, value), attrsNamed("a", MaxAccountAttributes/2, value), false, MaxAccountAttributes},
		{"no account attributes", attrsNamed("c", MaxAccountAttributes, value), nil, false, MaxAccountAttributes},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(ctx, &Options{Authenticator: NewStaticTokens(StaticToken{Token: "t", Principal: "carol", Attributes: tc.cred})})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, e.Shutdown(ctx)) })
			p, err := e.auth.Authenticate(ctx, "t")
			require.NoError(t, err)
			require.NoError(t, checkPrincipal(p), "the credential alone is within the bounds")
			_, err = e.resolvePrincipal(p)
			require.NoError(t, err, "no account yet")

			_, err = e.CreateAccount(ctx, Account{ID: "carol", Attributes: tc.acct})
			require.NoError(t, err, "the account alone is within the bounds")
			got, err := e.resolvePrincipal(p)
			if tc.refused {
				require.Equal(t, CodeUnauthenticated, ErrorCode(err))
				require.Nil(t, got)
				require.NotContains(t, err.Error(), "vvv", "the refusal quotes no value")
				return
			}
			require.NoError(t, err)
			require.Len(t, got.Attributes, tc.wantAttrsLen)
		})
	}
}
