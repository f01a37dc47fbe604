package identity_test

import (
	"context"
	"fmt"

	"pigeon"
	"pigeon/identity"
)

// A chain of methods as pigeon serve builds it: an OIDC issuer, the
// broker's grant tokens, then static tokens. The engine hands it every
// credential; server.Options.TLS with identity.ServerTLS adds client
// certificates.
func ExampleNewChain() {
	oidc, err := identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{{
		URL: "https://idp.example.com", Audiences: []string{"pigeon"}, RolesClaim: "roles",
	}}})
	if err != nil {
		panic(err)
	}
	chain := identity.NewChain(nil,
		identity.Method{Name: pigeon.AuthOIDC, Auth: oidc},
		identity.Method{Name: pigeon.AuthGrant, Auth: identity.Bearer(pigeon.GrantTokens())},
		identity.Method{Name: pigeon.AuthToken, Auth: identity.Lookup(pigeon.NewStaticTokens(
			pigeon.StaticToken{Token: "orders-token", Principal: "spiffe://merchant-prod/ns/orders/sa/orders-api"}))},
	)
	ctx := context.Background()
	e, err := pigeon.New(ctx, &pigeon.Options{Authenticator: chain})
	if err != nil {
		panic(err)
	}
	defer e.Shutdown(ctx)
	p, err := e.AuthenticateCredential(ctx, pigeon.Credential{Bearer: "orders-token", RemoteAddr: "192.0.2.10:5000"})
	fmt.Println(p.ID, p.Method, err)
	_, err = e.AuthenticateCredential(ctx, pigeon.Credential{Bearer: "who-knows", RemoteAddr: "192.0.2.10:5000"})
	fmt.Println(pigeon.ErrorCode(err))
	fmt.Println(chain.Methods())
	// Output:
	// spiffe://merchant-prod/ns/orders/sa/orders-api token <nil>
	// UNAUTHENTICATED
	// [oidc grant token]
}
