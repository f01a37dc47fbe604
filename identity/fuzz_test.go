package identity_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"pigeon"
	"pigeon/identity"
)

// FuzzJWTInput feeds arbitrary bearer strings to the OIDC method: it must
// never panic, accept only what the issuer signed, and never quote the
// input in its refusal.
func FuzzJWTInput(f *testing.F) {
	var t testing.TB = f
	p := newIDP(t)
	p.addKey(t, "rsa-1", jose.RS256, true)
	p.addKey(t, "ed-1", jose.EdDSA, true)
	m, err := identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{{URL: p.srv.URL, Audiences: []string{"pigeon"},
		JWKSURL: p.srv.URL + "/jwks", RolesClaim: "roles", MinRefreshInterval: time.Hour}}})
	if err != nil {
		f.Fatal(err)
	}
	good := p.sign(t, "rsa-1", p.good("user-1"))
	expired := p.good("user-1")
	expired["exp"] = time.Now().Add(-time.Hour).Unix()
	for _, s := range []string{good, p.sign(t, "ed-1", p.good("user-1")), p.sign(t, "rsa-1", expired),
		unsigned("rsa-1", p.good("user-1")), p.hmacWithPublicKey(t, "rsa-1", p.good("user-1")),
		"eyJ.eyJ.", "a.b.c", "", strings.Repeat("A", 100), good[:len(good)-3] + "AAA"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		pr, err := m.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: tok})
		if err == nil {
			if pr.ID != "user-1" || pr.Method != pigeon.AuthOIDC {
				t.Fatalf("accepted a token for %q (%s)", pr.ID, pr.Method)
			}
			return
		}
		if len(tok) >= 16 && strings.Contains(err.Error(), tok) {
			t.Fatalf("the refusal quotes the token: %v", err)
		}
	})
}
