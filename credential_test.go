package pigeon_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// chainAuth is a two-step CredentialAuthenticator: grant tokens, then a
// fixed "oidc" principal for the bearer "jwt".
type chainAuth struct{}

func (chainAuth) Authenticate(ctx context.Context, s string) (*pigeon.Principal, error) {
	return chainAuth{}.AuthenticateCredential(ctx, pigeon.Credential{Bearer: s})
}

func (chainAuth) AuthenticateCredential(ctx context.Context, c pigeon.Credential) (*pigeon.Principal, error) {
	p, err := pigeon.GrantTokens().Authenticate(ctx, c.Bearer)
	if err == nil || !errors.Is(err, pigeon.ErrUnrecognized) {
		return p, err
	}
	if c.Bearer == "jwt" {
		return &pigeon.Principal{ID: carol, Roles: []string{"from-token"}, Method: pigeon.AuthOIDC}, nil
	}
	return nil, pigeon.ErrUnrecognized
}

func TestAuthenticateCredential(t *testing.T) {
	ctx := context.Background()
	e, err := pigeon.New(ctx, &pigeon.Options{Authenticator: chainAuth{}})
	require.NoError(t, err)
	defer e.Shutdown(ctx)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"from-account"}, Attributes: map[string]string{"team": "chat"}})
	require.NoError(t, err)

	// A method's principal is merged with its account, and keeps its method.
	p, err := e.AuthenticateCredential(ctx, pigeon.Credential{Bearer: "jwt", RemoteAddr: "192.0.2.1:1"})
	require.NoError(t, err)
	require.Equal(t, pigeon.AuthOIDC, p.Method)
	require.ElementsMatch(t, []string{"from-token", "from-account"}, p.Roles)
	require.Equal(t, "chat", p.Attributes["team"])

	// GrantTokens verifies against the engine that authenticates.
	g, err := e.IssueGrant(ctx, carol, []string{"from-account"}, time.Hour)
	require.NoError(t, err)
	p, err = e.Authenticate(ctx, g.Token)
	require.NoError(t, err)
	require.Equal(t, pigeon.AuthGrant, p.Method)
	require.NoError(t, e.RevokeGrant(ctx, g.JTI))
	_, err = e.Authenticate(ctx, g.Token)
	require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err), "a recognized, revoked grant is refused")

	// Outside an engine, GrantTokens refuses; unrecognized is UNAUTHENTICATED.
	_, err = pigeon.GrantTokens().Authenticate(ctx, g.Token)
	require.Error(t, err)
	_, err = e.Authenticate(ctx, "nothing")
	require.ErrorIs(t, err, pigeon.ErrUnauthenticated)

	// A plain Authenticator: the method defaults to token.
	e2, err := pigeon.New(ctx, &pigeon.Options{Authenticator: pigeon.NewStaticTokens(pigeon.StaticToken{Token: "t", Principal: dave})})
	require.NoError(t, err)
	defer e2.Shutdown(ctx)
	p, err = e2.AuthenticateCredential(ctx, pigeon.Credential{Bearer: "t"})
	require.NoError(t, err)
	require.Equal(t, pigeon.AuthToken, p.Method)
}
