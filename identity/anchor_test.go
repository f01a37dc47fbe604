package identity_test

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/identity"
	"pigeon/internal/testpki"
)

// nonCA is a certificate that may not sign others, made by c: a
// workload's leaf (basic constraints CA:FALSE), a leaf without basic
// constraints, or a "CA" whose key usage leaves out certificate signing.
func (c *ca) nonCA(t *testing.T, tmpl *x509.Certificate) *ca {
	t.Helper()
	k := newKey(t)
	tmpl.SerialNumber, tmpl.Subject = testpki.Serial(t), pkix.Name{CommonName: "not a CA"}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, k.Public(), c.key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &ca{cert: cert, key: k}
}

// A trust domain's authorities are certificate authorities. crypto/x509
// does not look at a root's basic constraints, so a workload's own
// certificate in the bundle (a chain file given as the client CA, say)
// would let that workload's key sign a certificate for any SPIFFE ID of
// the trust domain. NewMTLS refuses such a bundle.
func TestMTLSAuthorityMustBeCA(t *testing.T) {
	root := newCA(t, "root")
	orders, err := url.Parse("spiffe://example.org/ns/orders/sa/orders-api")
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		tmpl *x509.Certificate
	}{
		{"a workload leaf (CA:FALSE)", &x509.Certificate{BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, URIs: []*url.URL{orders}}},
		{"a leaf without basic constraints", &x509.Certificate{KeyUsage: x509.KeyUsageDigitalSignature, URIs: []*url.URL{orders}}},
		{"a CA whose key usage excludes signing certificates", &x509.Certificate{IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageDigitalSignature}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			anchor := root.nonCA(t, tc.tmpl)
			// What the anchor's key could do if the bundle were taken.
			forged := anchor.svid(t, "spiffe://example.org/ns/admin/sa/root", certUsage{ku: x509.KeyUsageDigitalSignature})
			m, err := identity.NewMTLS(&identity.MTLSOptions{TrustDomains: []identity.TrustDomain{
				{Name: "example.org", Authorities: []*x509.Certificate{root.cert, anchor.cert}}}})
			if err == nil {
				_, verr := m.Verify([]*x509.Certificate{forged})
				require.Error(t, verr, "a certificate signed by a non-CA authority verified")
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), "not a certificate authority")
			require.Contains(t, err.Error(), "example.org")
		})
	}
	// A real CA is still accepted.
	_, err = identity.NewMTLS(&identity.MTLSOptions{TrustDomains: []identity.TrustDomain{{Name: "example.org", Authorities: []*x509.Certificate{root.cert}}}})
	require.NoError(t, err)
}

// A leaf's SPIFFE ID has a path (X.509-SVID 3.1 and 5.2): the ID of the
// trust domain itself (spiffe://example.org) names its signing
// authorities, never a caller, so a leaf carrying it is refused.
func TestMTLSLeafIDNeedsAPath(t *testing.T) {
	root := newCA(t, "root")
	m, err := identity.NewMTLS(&identity.MTLSOptions{TrustDomains: []identity.TrustDomain{{Name: "example.org", Authorities: []*x509.Certificate{root.cert}}}})
	require.NoError(t, err)
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"spiffe://example.org", false},
		{"spiffe://example.org/", false},
		{"spiffe://example.org/ns/orders/sa/orders-api", true},
		{"spiffe://example.org/x", true},
	} {
		leaf, _ := root.issue(t, leafOpts{spiffeID: tc.id})
		id, err := m.Verify([]*x509.Certificate{leaf})
		if tc.ok {
			require.NoError(t, err, tc.id)
			require.Equal(t, tc.id, id.String())
			continue
		}
		require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err), "%s accepted as %q", tc.id, id.String())
		p, err := m.AuthenticateCredential(context.Background(), pigeon.Credential{PeerCertificates: []*x509.Certificate{leaf}})
		require.Nil(t, p, tc.id)
		require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err), tc.id)
	}
}
