package cli

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/demo"
)

// serve --trusted-proxy reaches the limiter of failed TLS handshakes: a
// load balancer that passes TLS through is every client's TCP peer, so
// counting its failed handshakes (clients without a certificate) locked
// every workload behind it out. Named with --trusted-proxy, the peer is
// spared, as at accept; not named, it is limited as any address is.
func TestServeTrustedProxySparedByTheHandshakeLimiter(t *testing.T) {
	dir := t.TempDir()
	writeTestPKI(t, dir, map[string]string{"orders": demo.Orders})
	pem, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(pem))
	good, err := tls.LoadX509KeyPair(filepath.Join(dir, "orders.pem"), filepath.Join(dir, "orders-key.pem"))
	require.NoError(t, err)

	for _, tc := range []struct {
		name    string
		proxies []string
		spared  bool
	}{
		{"named", []string{"127.0.0.1"}, true},
		{"not named", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startServe(t, serveConfig{tlsCert: filepath.Join(dir, "server.pem"), tlsKey: filepath.Join(dir, "server-key.pem"),
				clientCA: []string{filepath.Join(dir, "ca.pem")}, trustDomains: []string{"merchant-prod"}, mtlsMode: "required",
				maxFailures: 2, failureWindow: time.Minute, trustedProxies: tc.proxies})
			addr := strings.TrimPrefix(r.url, "http://")
			handshake := func(certs ...tls.Certificate) error {
				c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots, Certificates: certs, ServerName: "localhost"})
				if err != nil {
					return err
				}
				defer c.Close()
				// TLS 1.3: a refused client certificate shows at the first read.
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				_, err = c.Write([]byte("GET /v1/healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"))
				if err == nil {
					buf := make([]byte, 12)
					_, err = c.Read(buf)
				}
				return err
			}
			for range 4 {
				require.Error(t, handshake(), "a handshake without a client certificate is refused")
			}
			err := handshake(good)
			if tc.spared {
				require.NoError(t, err, "the trusted peer's workloads keep their handshakes")
			} else {
				require.Error(t, err, "an address that is no trusted proxy is limited")
			}
		})
	}
}
