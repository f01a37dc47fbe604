package identity

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certCheckInterval is how often a handshake looks at the files' times.
const certCheckInterval = time.Second

// CertFile is a server certificate read from a PEM certificate (chain)
// file and a PEM key file, and read again when either file's modification
// time or size changes (looked at, cheaply, at most once a second, from a
// handshake) or when Reload is called (on SIGHUP, say). A new pair that
// does not load keeps the old certificate in use and is logged.
// Connections already open are not touched. It is safe for concurrent use.
type CertFile struct {
	certPath, keyPath string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]fileStamp
	checked time.Time
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// LoadCertFile reads the pair; a file that cannot be read or parsed is an
// error naming it (never its contents). logger may be nil.
func LoadCertFile(certPath, keyPath string, logger *slog.Logger) (*CertFile, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &CertFile{certPath: certPath, keyPath: keyPath, log: logger}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Reload reads the files now. On failure the certificate in use stays.
func (c *CertFile) Reload() error {
	st, err := c.stamps()
	if err == nil {
		var cert *tls.Certificate
		cert, err = loadPair(c.certPath, c.keyPath)
		if err == nil {
			c.mu.Lock()
			first := c.cert == nil
			c.cert, c.stamp, c.checked = cert, st, time.Now()
			c.mu.Unlock()
			if !first {
				c.log.Info("identity: server certificate reloaded", "cert", c.certPath, "notAfter", cert.Leaf.NotAfter)
			}
			return nil
		}
	}
	c.mu.Lock()
	if c.cert != nil {
		c.stamp, c.checked = st, time.Now() // do not retry a bad file on every handshake
		c.log.Warn("identity: server certificate not reloaded; the previous one stays in use", "reason", err.Error())
	}
	c.mu.Unlock()
	return err
}

func (c *CertFile) stamps() ([2]fileStamp, error) {
	var out [2]fileStamp
	for i, p := range []string{c.certPath, c.keyPath} {
		fi, err := os.Stat(p)
		if err != nil {
			return out, fmt.Errorf("%s: %w", p, errors.Unwrap(err))
		}
		out[i] = fileStamp{mod: fi.ModTime(), size: fi.Size()}
	}
	return out, nil
}

// GetCertificate is a tls.Config.GetCertificate that serves the current
// certificate, reloading it first when the files changed.
func (c *CertFile) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	due := time.Since(c.checked) >= certCheckInterval
	if due {
		c.checked = time.Now()
	}
	cur := c.cert
	old := c.stamp
	c.mu.Unlock()
	if due {
		if st, err := c.stamps(); err == nil && st != old {
			_ = c.Reload()
			c.mu.Lock()
			cur = c.cert
			c.mu.Unlock()
		}
	}
	return cur, nil
}

// Certificate returns the certificate in use.
func (c *CertFile) Certificate() *tls.Certificate {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cert
}

// loadPair reads and checks a certificate and key; errors name the file
// and never quote it.
func loadPair(certPath, keyPath string) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certPath, errors.Unwrap(err))
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyPath, errors.Unwrap(err))
	}
	if b, _ := pem.Decode(certPEM); b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: not a PEM certificate", certPath)
	}
	if b, _ := pem.Decode(keyPEM); b == nil {
		return nil, fmt.Errorf("%s: not a PEM private key", keyPath)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// The error of X509KeyPair describes, never quotes, the PEM blocks.
		return nil, fmt.Errorf("%s with %s: %v", certPath, keyPath, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%s: %v", certPath, err)
		}
	}
	if time.Now().After(cert.Leaf.NotAfter) {
		return nil, fmt.Errorf("%s: the certificate expired at %s", certPath, cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return &cert, nil
}

// LoadCAFiles reads PEM bundles of CA certificates; each file must hold at
// least one. Errors name the file.
func LoadCAFiles(paths ...string) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, errors.Unwrap(err))
		}
		n := 0
		for {
			var blk *pem.Block
			blk, b = pem.Decode(b)
			if blk == nil {
				break
			}
			if blk.Type != "CERTIFICATE" {
				continue
			}
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%s: certificate %d: %v", p, n+1, err)
			}
			out = append(out, c)
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("%s: no PEM certificate", p)
		}
	}
	return out, nil
}
