package identity_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/identity"
	"pigeon/server"
)

// An identity provider's roles claim names what its users may be, as the
// provider sees it; the broker's own roles, admin and auditor, give the
// HTTP API's account, grant, audit and quarantine routes, and programs
// (server.RolePrograms) its program routes: deploying code that runs as
// the caller's account. A provider
// whose users or client applications may set their own roles (a custom
// attribute, a self-service group) made any of them the broker's admin,
// or its program operator, or a bridge (pigeon.RoleBridge: publishing at
// a depth). An issuer asserts admin, auditor, programs or bridge only when
// its Roles lists them, and with Roles set, no role it does not
// list.
func TestOIDCRolesAnIssuerMayAssert(t *testing.T) {
	for _, tc := range []struct {
		name    string
		allowed []string
		claim   []string
		want    []string
	}{
		{"ordinary roles pass", nil, []string{"reader", "writer"}, []string{"reader", "writer"}},
		{"admin is dropped", nil, []string{"admin", "reader"}, []string{"reader"}},
		{"auditor is dropped", nil, []string{"auditor"}, nil},
		{"programs is dropped", nil, []string{server.RolePrograms, "reader"}, []string{"reader"}},
		{"bridge is dropped", nil, []string{pigeon.RoleBridge, "reader"}, []string{"reader"}},
		{"bridge when listed", []string{pigeon.RoleBridge}, []string{pigeon.RoleBridge}, []string{pigeon.RoleBridge}},
		{"programs when listed", []string{server.RolePrograms}, []string{server.RolePrograms}, []string{server.RolePrograms}},
		{"admin when listed", []string{"admin", "reader"}, []string{"admin", "reader", "writer"}, []string{"admin", "reader"}},
		{"only listed roles", []string{"reader"}, []string{"reader", "writer", "auditor"}, []string{"reader"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newIDP(t)
			p.addKey(t, "rsa-1", jose.RS256, true)
			m, err := identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{{URL: p.srv.URL, Audiences: []string{"pigeon"},
				JWKSURL: p.srv.URL + "/jwks", RolesClaim: "roles", Roles: tc.allowed, MinRefreshInterval: time.Minute}}})
			require.NoError(t, err)
			c := p.good("user-1")
			roles := make([]any, len(tc.claim))
			for i, r := range tc.claim {
				roles[i] = r
			}
			c["roles"] = roles
			pr, err := m.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: p.sign(t, "rsa-1", c)})
			require.NoError(t, err)
			require.Equal(t, tc.want, pr.Roles)
		})
	}
	_, err := identity.CheckIssuer(identity.Issuer{URL: "https://idp.example.com", Audiences: []string{"pigeon"}, Roles: []string{""}})
	require.Error(t, err, "an empty role")
}
