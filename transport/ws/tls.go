package ws

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// WithTLS dials wss:// (and https://) URLs with c (cloned): the CA pool
// that verifies the server, and a client certificate for mTLS. Without it
// the system roots verify the server and no client certificate is sent.
// It has no effect with WithHTTPClient, whose transport decides.
func WithTLS(c *tls.Config) Option {
	return func(o *dialOptions) {
		if c != nil {
			o.tls = c.Clone()
		}
	}
}

// TLSFiles names the PEM files of a client's TLS configuration.
type TLSFiles struct {
	// CA is a bundle of the certificate authorities that verify the server;
	// empty: the system roots.
	CA string
	// Cert and Key are the client certificate (chain) and its key for mTLS;
	// both or neither.
	Cert, Key string
	// ServerName overrides the name the server's certificate must carry
	// (default: the URL's host).
	ServerName string
}

// ClientTLS builds a client TLS configuration (TLS 1.2 or later) from
// files. An error names the file, never its contents.
func ClientTLS(f TLSFiles) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CA != "" {
		b, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.CA, errors.Unwrap(err))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("%s: no PEM certificate", f.CA)
		}
		c.RootCAs = pool
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("a client certificate needs both its certificate and its key file")
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("%s with %s: %v", f.Cert, f.Key, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}
