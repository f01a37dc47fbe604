// Package testpki makes certificate authorities and certificates for
// tests: a CA, SPIFFE client certificates and server certificates for
// 127.0.0.1 it signs, and the PEM files a server loads. ECDSA P-256
// throughout; serial numbers are random. Safe for concurrent use.
package testpki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// CA is a certificate authority (basic constraints CA:TRUE, key usage
// keyCertSign and cRLSign), valid from an hour ago for a day.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// NewCA makes a CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	k := NewKey(t)
	tmpl := &x509.Certificate{SerialNumber: Serial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.Public(), k)
	require.NoError(t, err)
	c, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &CA{Cert: c, Key: k}
}

// Leaf shapes a certificate Sign makes: its SPIFFE ID (URI SAN; "" for
// none), its validity (zero: from an hour ago, for 12 hours), and whether
// it names localhost and 127.0.0.1 for a server.
type Leaf struct {
	SPIFFEID            string
	NotBefore, NotAfter time.Time
	Server              bool
}

// Sign makes a leaf certificate for client and server authentication
// shaped by o, and its key.
func (c *CA) Sign(t testing.TB, o Leaf) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	k := NewKey(t)
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(12 * time.Hour)
	}
	tmpl := &x509.Certificate{SerialNumber: Serial(t), Subject: pkix.Name{CommonName: "leaf"},
		NotBefore: o.NotBefore, NotAfter: o.NotAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}
	if o.SPIFFEID != "" {
		u, err := url.Parse(o.SPIFFEID)
		require.NoError(t, err)
		tmpl.URIs = []*url.URL{u}
	}
	if o.Server {
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, k.Public(), c.Key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return leaf, k
}

// Issue signs a leaf for the SPIFFE ID id, or, when id is "", a server's
// for 127.0.0.1, as a tls.Certificate (see Sign).
func (c *CA) Issue(t testing.TB, id string) tls.Certificate {
	t.Helper()
	leaf, k := c.Sign(t, Leaf{SPIFFEID: id, Server: id == ""})
	return tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: k, Leaf: leaf}
}

// ServerFiles writes a server certificate for 127.0.0.1 that c signs, and
// its key, as PEM files server.pem and server-key.pem in dir (0600).
func (c *CA) ServerFiles(t testing.TB, dir string) (certPath, keyPath string) {
	t.Helper()
	leaf, k := c.Sign(t, Leaf{Server: true})
	return WritePair(t, dir, "server", leaf, k)
}

// WritePair writes cert and key as PEM files name.pem and name-key.pem in
// dir (0600).
func WritePair(t testing.TB, dir, name string, cert *x509.Certificate, key *ecdsa.PrivateKey) (certPath, keyPath string) {
	t.Helper()
	certPath, keyPath = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	WriteCerts(t, certPath, cert)
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600))
	return certPath, keyPath
}

// WriteCerts writes certs, PEM encoded one after the other, to path (0600).
func WriteCerts(t testing.TB, path string, certs ...*x509.Certificate) {
	t.Helper()
	var b []byte
	for _, c := range certs {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	require.NoError(t, os.WriteFile(path, b, 0o600))
}

// NewKey makes an ECDSA P-256 key.
func NewKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return k
}

// Serial is a random serial number for a certificate.
func Serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	require.NoError(t, err)
	return n.Add(n, big.NewInt(1))
}
