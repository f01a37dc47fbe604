package identity_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/x509"
	"testing"
	"time"

	"pigeon/internal/testpki"
)

// ca is a test certificate authority (internal/testpki makes the
// certificates).
type ca struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func newKey(t *testing.T) *ecdsa.PrivateKey { return testpki.NewKey(t) }

func newCA(t *testing.T, name string) *ca {
	c := testpki.NewCA(t, name)
	return &ca{cert: c.Cert, key: c.Key}
}

// leafOpts shape a leaf certificate.
type leafOpts struct {
	spiffeID            string // URI SAN; "" for none
	notBefore, notAfter time.Time
	server              bool
}

// issue signs a leaf and returns its certificate and key.
func (c *ca) issue(t *testing.T, o leafOpts) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	return (&testpki.CA{Cert: c.cert, Key: c.key}).Sign(t, testpki.Leaf{SPIFFEID: o.spiffeID, NotBefore: o.notBefore, NotAfter: o.notAfter, Server: o.server})
}

// writePair writes a certificate and key as PEM files in dir.
func writePair(t *testing.T, dir, name string, cert *x509.Certificate, key *ecdsa.PrivateKey) (certPath, keyPath string) {
	return testpki.WritePair(t, dir, name, cert, key)
}

func writeCert(t *testing.T, path string, certs ...*x509.Certificate) {
	testpki.WriteCerts(t, path, certs...)
}
