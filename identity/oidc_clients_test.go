package identity_test

import (
	"context"
	"testing"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/identity"
)

// An issuer serves many client applications, and an audience may be
// shared among them: with Clients set, only tokens issued to one of those
// applications sign in, by azp or, without it, RFC 9068's client_id.
// Before, any application of the issuer that obtained a token for the
// audience signed its users in.
func TestOIDCClients(t *testing.T) {
	p := newIDP(t)
	p.addKey(t, "rsa-1", jose.RS256, true)
	m, err := identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{{
		URL: p.srv.URL, JWKSURL: p.srv.URL + "/jwks", Audiences: []string{"pigeon"}, Clients: []string{"orders-app", "billing"},
	}}})
	require.NoError(t, err)
	with := func(claims map[string]any) string {
		c := p.good("user-1")
		for k, v := range claims {
			c[k] = v
		}
		return p.sign(t, "rsa-1", c)
	}
	for _, tc := range []struct {
		name   string
		claims map[string]any
		ok     bool
	}{
		{"azp listed", map[string]any{"azp": "orders-app"}, true},
		{"client_id listed", map[string]any{"client_id": "billing"}, true},
		{"azp wins over client_id", map[string]any{"azp": "billing", "client_id": "other"}, true},
		{"azp not listed", map[string]any{"azp": "other-app"}, false},
		{"azp not listed, client_id listed", map[string]any{"azp": "other-app", "client_id": "billing"}, false},
		{"client_id not listed", map[string]any{"client_id": "other-app"}, false},
		{"neither", nil, false},
		{"azp not a string", map[string]any{"azp": []string{"orders-app"}}, false},
		{"azp in another case", map[string]any{"azp": "Orders-App"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr, err := m.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: with(tc.claims)})
			if tc.ok {
				require.NoError(t, err)
				require.Equal(t, "user-1", pr.ID)
				return
			}
			require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err), "%v", err)
			require.Nil(t, pr)
		})
	}

	// Without a list, any client of the issuer's signs in, as before.
	open, err := identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{{URL: p.srv.URL, JWKSURL: p.srv.URL + "/jwks", Audiences: []string{"pigeon"}}}})
	require.NoError(t, err)
	_, err = open.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: with(map[string]any{"azp": "other-app"})})
	require.NoError(t, err)

	_, err = identity.CheckIssuer(identity.Issuer{URL: p.srv.URL, JWKSURL: p.srv.URL + "/jwks", Audiences: []string{"pigeon"}, Clients: []string{""}})
	require.ErrorContains(t, err, "a client may not be empty")
}
