package identity_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/identity"
	"pigeon/internal/testpki"
)

// certUsage shapes a certificate's usages: its extended key usages (known
// and unknown) and its key usage.
type certUsage struct {
	eku     []x509.ExtKeyUsage
	unknown []asn1.ObjectIdentifier
	ku      x509.KeyUsage
	key     crypto.Signer // nil: a new P-256 key
}

func (u certUsage) signer(t *testing.T) crypto.Signer {
	if u.key != nil {
		return u.key
	}
	return newKey(t)
}

// intermediate signs a CA certificate under c with the given extended key
// usages.
func (c *ca) intermediate(t *testing.T, u certUsage) *ca {
	t.Helper()
	k := u.signer(t)
	tmpl := &x509.Certificate{SerialNumber: testpki.Serial(t), Subject: pkix.Name{CommonName: "intermediate"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		ExtKeyUsage: u.eku, UnknownExtKeyUsage: u.unknown}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, k.Public(), c.key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &ca{cert: cert, key: k}
}

// svid signs a leaf with SPIFFE ID id and the given usages under c.
func (c *ca) svid(t *testing.T, id string, u certUsage) *x509.Certificate {
	t.Helper()
	k := u.signer(t)
	uri, err := url.Parse(id)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: testpki.Serial(t), Subject: pkix.Name{CommonName: "leaf"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(12 * time.Hour),
		KeyUsage: u.ku, ExtKeyUsage: u.eku, UnknownExtKeyUsage: u.unknown, URIs: []*url.URL{uri}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, k.Public(), c.key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return cert
}

// A client certificate is accepted only when every certificate of the
// chain it verifies through allows client authentication, as crypto/x509
// judges a chain for a purpose: a certificate that lists no extended key
// usage allows any; one that lists some (known or not) allows only those.
// A leaf restricted to another purpose (an unknown OID alone, say), or
// issued by an intermediate restricted to server authentication, is not a
// client certificate. Its key usage, when it has one, includes digital
// signature (the SPIFFE X.509-SVID rule for a leaf).
func TestMTLSChainUsage(t *testing.T) {
	root := newCA(t, "root")
	m, err := identity.NewMTLS(&identity.MTLSOptions{TrustDomains: []identity.TrustDomain{{Name: "example.org", Authorities: []*x509.Certificate{root.cert}}}})
	require.NoError(t, err)
	sig := x509.KeyUsageDigitalSignature
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	server := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	otherPurpose := []asn1.ObjectIdentifier{{1, 3, 6, 1, 4, 1, 99999, 1}}
	for _, tc := range []struct {
		name   string
		inter  *certUsage // nil: the leaf is signed by the root
		leaf   certUsage
		accept bool
	}{
		{"leaf for client auth", nil, certUsage{eku: client, ku: sig}, true},
		{"leaf without extended key usage", nil, certUsage{ku: sig}, true},
		{"leaf for any purpose", nil, certUsage{eku: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}, ku: sig}, true},
		{"leaf without key usage", nil, certUsage{eku: client}, true},
		{"leaf for server auth only", nil, certUsage{eku: server, ku: sig}, false},
		{"leaf for an unknown purpose only", nil, certUsage{unknown: otherPurpose, ku: sig}, false},
		{"leaf for client auth and an unknown purpose", nil, certUsage{eku: client, unknown: otherPurpose, ku: sig}, true},
		{"leaf for key encipherment only", nil, certUsage{eku: client, ku: x509.KeyUsageKeyEncipherment}, false},
		{"intermediate without extended key usage", &certUsage{}, certUsage{eku: client, ku: sig}, true},
		{"intermediate for client auth", &certUsage{eku: client}, certUsage{eku: client, ku: sig}, true},
		{"intermediate for server auth only", &certUsage{eku: server}, certUsage{eku: client, ku: sig}, false},
		{"intermediate for server auth, leaf without extended key usage", &certUsage{eku: server}, certUsage{ku: sig}, false},
		{"intermediate for an unknown purpose only", &certUsage{unknown: otherPurpose}, certUsage{eku: client, ku: sig}, false},
		// Key strength: RSA of at least 2048 bits, elliptic curves of at
		// least 256, for the leaf and every authority of its chain.
		{"leaf with RSA-2048", nil, certUsage{eku: client, ku: sig, key: rsaKey(t, 2048)}, true},
		{"leaf with RSA-1024", nil, certUsage{eku: client, ku: sig, key: rsaKey(t, 1024)}, false},
		{"leaf with P-224", nil, certUsage{eku: client, ku: sig, key: ecKey(t, elliptic.P224())}, false},
		{"leaf with P-384", nil, certUsage{eku: client, ku: sig, key: ecKey(t, elliptic.P384())}, true},
		{"leaf with Ed25519", nil, certUsage{eku: client, ku: sig, key: edKey(t)}, true},
		{"intermediate with RSA-1024", &certUsage{key: rsaKey(t, 1024)}, certUsage{eku: client, ku: sig}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			issuer := root
			if tc.inter != nil {
				issuer = root.intermediate(t, *tc.inter)
			}
			leaf := issuer.svid(t, writer, tc.leaf)
			chain := []*x509.Certificate{leaf}
			if tc.inter != nil {
				chain = append(chain, issuer.cert)
			}
			for range 2 { // verified, then (when accepted) from the cache
				p, err := m.AuthenticateCredential(context.Background(), pigeon.Credential{PeerCertificates: chain})
				if tc.accept {
					require.NoError(t, err)
					require.Equal(t, writer, p.ID)
					continue
				}
				require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err), "%v", err)
				require.Nil(t, p)
			}
		})
	}
}

func rsaKey(t *testing.T, bits int) crypto.Signer {
	k, err := rsa.GenerateKey(rand.Reader, bits)
	require.NoError(t, err)
	return k
}

func ecKey(t *testing.T, c elliptic.Curve) crypto.Signer {
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	require.NoError(t, err)
	return k
}

func edKey(t *testing.T) crypto.Signer {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	return k
}
