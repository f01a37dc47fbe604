// Package testpki makes certificate authorities and certificates for
// tests: a CA, SPIFFE client certificates and server certificates for
// 127.0.0.1 it signs, and the PEM files a server loads. ECDSA P-256
// throughout; serial numbers are random. Safe for concurrent use.
package testpki

import (
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
// keyCertSign), valid from an hour ago for a day.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA makes a CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	k := newKey(t)
	tmpl := &x509.Certificate{SerialNumber: serial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.Public(), k)
	require.NoError(t, err)
	c, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &CA{Cert: c, Key: k}
}

// Issue signs a leaf for client and server authentication, valid from
// an hour ago for 12 hours: for the SPIFFE ID id (its URI SAN), or, when
// id is "", a server's for 127.0.0.1.
func (c *CA) Issue(t testing.TB, id string) tls.Certificate {
	t.Helper()
	k := newKey(t)
	tmpl := &x509.Certificate{SerialNumber: serial(t), Subject: pkix.Name{CommonName: "leaf"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(12 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}
	if id == "" {
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		u, err := url.Parse(id)
		require.NoError(t, err)
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, k.Public(), c.Key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k, Leaf: leaf}
}

// ServerFiles writes a server certificate for 127.0.0.1 that c signs, and
// its key, as PEM files server.pem and server-key.pem in dir (0600).
func (c *CA) ServerFiles(t testing.TB, dir string) (certPath, keyPath string) {
	t.Helper()
	sc := c.Issue(t, "")
	kb, err := x509.MarshalPKCS8PrivateKey(sc.PrivateKey)
	require.NoError(t, err)
	certPath, keyPath = filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	require.NoError(t, os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: sc.Certificate[0]}), 0o600))
	require.NoError(t, os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600))
	return certPath, keyPath
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return k
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	require.NoError(t, err)
	return n.Add(n, big.NewInt(1))
}
