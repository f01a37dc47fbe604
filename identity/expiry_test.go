package identity_test

import (
	"context"
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/identity"
)

// The OIDC principal's Expires is the token's exp plus the leeway: the
// instant after which the token itself is refused.
func TestOIDCPrincipalExpires(t *testing.T) {
	f := newOIDCFixture(t, false)
	now := f.clk.Now()
	for _, tc := range []struct {
		name string
		exp  time.Time
	}{
		{"an hour left", now.Add(time.Hour)},
		{"two minutes left", now.Add(2 * time.Minute)},
		{"expired within the leeway", now.Add(-10 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claims := f.p.good("user-1")
			claims["exp"] = tc.exp.Unix()
			tok := f.p.sign(t, "rsa-1", claims)
			p, err := f.auth(tok)
			require.NoError(t, err)
			want := time.Unix(tc.exp.Unix(), 0).Add(identity.DefaultLeeway)
			require.True(t, p.Expires.Equal(want), "Expires %v, want exp+leeway %v", p.Expires, want)

			// Consistent with the token's own refusal: accepted up to
			// Expires, refused after it.
			at := func(when time.Time) error {
				m, err := identity.NewOIDC(&identity.OIDCOptions{Now: func() time.Time { return when },
					Issuers: []identity.Issuer{{URL: f.p.srv.URL, Audiences: []string{"pigeon"}, JWKSURL: f.p.srv.URL + "/jwks"}}})
				require.NoError(t, err)
				_, err = m.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: tok})
				return err
			}
			require.NoError(t, at(want.Add(-time.Second)))
			require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(at(want.Add(time.Second))))
		})
	}
	p, err := f.auth("static-1")
	require.NoError(t, err)
	require.True(t, p.Expires.IsZero(), "a static token does not expire")
}

// The mTLS principal's Expires is the earliest NotAfter of the chain it
// verified through: the leaf's, unless its CA expires first.
func TestMTLSPrincipalExpires(t *testing.T) {
	root := newCA(t, "root")
	m, err := identity.NewMTLS(&identity.MTLSOptions{TrustDomains: []identity.TrustDomain{{Name: "example.org", Authorities: []*x509.Certificate{root.cert}}}})
	require.NoError(t, err)
	for _, tc := range []struct {
		name     string
		notAfter time.Time
		want     func(leaf *x509.Certificate) time.Time
	}{
		{"the leaf expires first", time.Now().Add(3 * time.Minute), func(leaf *x509.Certificate) time.Time { return leaf.NotAfter }},
		{"the CA expires first", time.Now().Add(48 * time.Hour), func(*x509.Certificate) time.Time { return root.cert.NotAfter }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaf, _ := root.issue(t, leafOpts{spiffeID: writer, notAfter: tc.notAfter})
			for range 2 { // verified, then from the cache
				p, err := m.AuthenticateCredential(context.Background(), pigeon.Credential{PeerCertificates: []*x509.Certificate{leaf}})
				require.NoError(t, err)
				require.Equal(t, writer, p.ID)
				require.True(t, p.Expires.Equal(tc.want(leaf)), "Expires %v, want %v", p.Expires, tc.want(leaf))
			}
		})
	}
}

// Through the engine and the chain, a contract negotiated with an OIDC
// token or a client certificate expires with it, not at the contract TTL
// (15 minutes).
func TestEdgeContractsExpireWithTheCredential(t *testing.T) {
	f := newEdge(t, false)
	ctx := context.Background()
	claims := f.p.good("user-1")
	exp := time.Now().Add(2 * time.Minute).Truncate(time.Second)
	claims["exp"] = exp.Unix()
	leaf, _ := f.root.issue(t, leafOpts{spiffeID: writer, notAfter: time.Now().Add(5 * time.Minute)})
	for _, tc := range []struct {
		name   string
		cred   pigeon.Credential
		method pigeon.AuthMethod
		want   time.Time
	}{
		{"oidc", pigeon.Credential{Bearer: f.p.sign(t, "ec-1", claims)}, pigeon.AuthOIDC, exp.Add(identity.DefaultLeeway)},
		{"mtls", pigeon.Credential{PeerCertificates: []*x509.Certificate{leaf}}, pigeon.AuthMTLS, leaf.NotAfter},
		{"static token", pigeon.Credential{Bearer: "static-1"}, pigeon.AuthToken, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := f.e.AuthenticateCredential(ctx, tc.cred)
			require.NoError(t, err)
			require.Equal(t, tc.method, p.Method)
			require.True(t, p.Expires.Equal(tc.want), "Expires %v, want %v", p.Expires, tc.want)
			k, err := f.e.Negotiate(ctx, p, "", []string{subject}, 0)
			require.NoError(t, err)
			if tc.want.IsZero() {
				require.WithinDuration(t, time.Now().Add(pigeon.DefaultContractTTL), k.ExpiresAt(), time.Minute)
				return
			}
			require.True(t, k.ExpiresAt().Equal(tc.want), "the contract expires at %v, want the credential's %v", k.ExpiresAt(), tc.want)
		})
	}
}
