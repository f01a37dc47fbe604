package identity_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/identity"
	"pigeon/internal/testlog"
)

// A load balancer that passes TLS through (the way to run mTLS behind
// one) is every client's TCP peer. Named as a trusted proxy, the server
// never locks it out for refused credentials nor caps it per source, but
// the limiter of failed handshakes counted it as one source: anyone
// reaching it opened a few connections without a client certificate and
// every workload behind it had its handshakes refused for the rest of the
// window, again and again. A trusted proxy's handshakes are not limited,
// as its connections are not at accept; other peers are.
func TestHandshakeLimiterSparesTrustedProxies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		proxies []netip.Prefix
		limited bool
	}{
		{"the peer is a trusted proxy", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, false},
		{"the peer is one of the trusted proxies", []netip.Prefix{netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("127.0.0.1/32")}, false},
		{"another proxy is trusted", []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, true},
		{"no proxy is trusted", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := newCA(t, "root")
			sc, sk := root.issue(t, leafOpts{server: true, spiffeID: "spiffe://example.org/pigeon"})
			certPath, keyPath := writePair(t, t.TempDir(), "server", sc, sk)
			cf, err := identity.LoadCertFile(certPath, keyPath, nil)
			require.NoError(t, err)
			mtls, err := identity.NewMTLS(&identity.MTLSOptions{Required: true,
				TrustDomains: []identity.TrustDomain{{Name: "example.org", Authorities: []*x509.Certificate{root.cert}}}})
			require.NoError(t, err)
			lim := identity.NewLimiter(&identity.LimiterOptions{MaxFailures: 2, Window: time.Hour})
			logs := &testlog.Buffer{}
			sconf, err := identity.ServerTLS(&identity.TLSOptions{Certificate: cf, MTLS: mtls, Limiter: lim,
				TrustedProxies: tc.proxies, Logger: logs.Logger()})
			require.NoError(t, err)

			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					go func() {
						tc := tls.Server(c, sconf)
						_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
						if tc.Handshake() == nil {
							_, _ = tc.Write([]byte{1}) // the client reads this once it is in
						}
						_ = tc.Close()
					}()
				}
			}()
			roots := x509.NewCertPool()
			roots.AddCert(root.cert)
			dial := func(cert *tls.Certificate) error {
				c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", l.Addr().String(),
					&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13,
						GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
							if cert == nil {
								return &tls.Certificate{}, nil
							}
							return cert, nil
						}})
				if err != nil {
					return err
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				b := make([]byte, 1)
				_, err = c.Read(b) // TLS 1.3: the server's verdict on the certificate arrives after the handshake
				return err
			}

			for range 5 { // anyone behind the peer, without a certificate
				require.Error(t, dial(nil))
			}
			leaf, key := root.issue(t, leafOpts{spiffeID: "spiffe://example.org/ns/orders/sa/api"})
			good := &tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key}
			err = dial(good)
			st := lim.Stats()
			if tc.limited {
				require.Error(t, err, "a source over the limit is refused, even with a good certificate")
				require.Positive(t, st.Limited)
				return
			}
			require.NoError(t, err, "a workload behind a trusted proxy is not refused for another's failures")
			require.Zero(t, st.Limited)
			require.Contains(t, logs.String(), "no client certificate, and one is required", "the failures are still logged")
		})
	}
}
