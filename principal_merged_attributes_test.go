package pigeon_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A static token's attributes laid over its account's, the account created
// after the token was configured, are held to MaxAccountAttributes at
// authentication.
func TestMergedAttributesRefusedAtAuthentication(t *testing.T) {
	f := newFixture(t, func(o *pigeon.Options) {
		o.Authenticator = pigeon.NewStaticTokens(pigeon.StaticToken{Token: "t", Principal: carol, Attributes: attributesOf(pigeon.MaxAccountAttributes, "v")})
	})
	p, err := f.e.Authenticate(ctx, "t")
	require.NoError(t, err, "no account yet")
	require.Len(t, p.Attributes, pigeon.MaxAccountAttributes)
	acct := make(map[string]string, pigeon.MaxAccountAttributes)
	for k := range attributesOf(pigeon.MaxAccountAttributes, "") {
		acct["b"+k] = "w"
	}
	_, err = f.e.CreateAccount(ctx, pigeon.Account{ID: carol, Attributes: acct})
	require.NoError(t, err)
	p, err = f.e.Authenticate(ctx, "t")
	requireCode(t, err, pigeon.CodeUnauthenticated)
	require.Nil(t, p)
	require.Equal(t, 1, auditCount(t, f.e, pigeon.EventAuthFailed, pigeon.CodeUnauthenticated))
	_, err = f.e.Connect(ctx, "t", []string{"chat.messages"})
	requireCode(t, err, pigeon.CodeUnauthenticated)
}
