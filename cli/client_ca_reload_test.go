package cli

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/demo"
	"pigeon/internal/testlog"
)

// TestClientCAsReloadOnHangup: rotating the client CA needs no restart.
// On SIGHUP (reload) the --client-ca files are read again: a client
// certificate of the CA taken out is refused at its next handshake, even
// one verified (and cached) before, and one of the CA put in is accepted.
// A file that does not load leaves the authorities in use. Before, the
// CAs read at start stayed until a restart: a CA withdrawn because its key
// leaked went on admitting every certificate it signed.
func TestClientCAsReloadOnHangup(t *testing.T) {
	f := newRotation(t)
	e, dirA, dirB := f.e, f.dirA, f.dirB
	require.NotNil(t, e.reloadCAs)
	logs := &testlog.Buffer{}

	handshake := func(clientDir string) error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			s := tls.Server(c, e.tls)
			_ = s.SetDeadline(time.Now().Add(10 * time.Second))
			if s.Handshake() == nil {
				_, _ = s.Write([]byte("ok"))
			}
		}()
		cert, err := tls.LoadX509KeyPair(filepath.Join(clientDir, "orders.pem"), filepath.Join(clientDir, "orders-key.pem"))
		require.NoError(t, err)
		roots := x509.NewCertPool()
		pemCA, err := os.ReadFile(filepath.Join(dirA, "ca.pem")) // the server's certificate is A's
		require.NoError(t, err)
		require.True(t, roots.AppendCertsFromPEM(pemCA))
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: roots,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }})
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		b := make([]byte, 2)
		_, err = conn.Read(b) // TLS 1.3: a refused certificate shows on the first read
		return err
	}

	require.NoError(t, handshake(dirA), "A's client, under A's CA")
	require.Error(t, handshake(dirB), "B's client, under A's CA")

	f.use(t, filepath.Join(dirB, "ca.pem"))
	reload(e.cert, e.reloadCAs, logs.Logger())
	require.Contains(t, logs.String(), "client CAs reloaded")
	require.Error(t, handshake(dirA), "A's client, verified before, after A's CA was taken out")
	require.NoError(t, handshake(dirB), "B's client, after B's CA was put in")

	require.NoError(t, os.WriteFile(f.caFile, []byte("not a certificate"), 0o600))
	reload(e.cert, e.reloadCAs, logs.Logger())
	require.Contains(t, logs.String(), "client CAs not reloaded; the previous ones stay in use")
	require.NoError(t, handshake(dirB), "a file that does not load leaves B's CA in use")
	require.Error(t, handshake(dirA))
}

// rotation is an edge with mTLS whose --client-ca file (caFile) holds CA
// A's bundle at first: the PKIs of two CAs (dirA, dirB, each with an
// "orders" client), the server's certificate A's.
type rotation struct {
	e                  *edge
	dirA, dirB, caFile string
}

func newRotation(t *testing.T) *rotation {
	t.Helper()
	r := &rotation{dirA: t.TempDir(), dirB: t.TempDir()}
	writeTestPKI(t, r.dirA, map[string]string{"orders": demo.Orders})
	writeTestPKI(t, r.dirB, map[string]string{"orders": demo.Orders})
	r.caFile = filepath.Join(t.TempDir(), "client-ca.pem")
	r.use(t, filepath.Join(r.dirA, "ca.pem"))
	var err error
	r.e, err = buildEdge(serveConfig{tlsCert: filepath.Join(r.dirA, "server.pem"), tlsKey: filepath.Join(r.dirA, "server-key.pem"),
		clientCA: []string{r.caFile}, trustDomains: []string{"merchant-prod"}, mtlsMode: "required"}, demo.Tokens(), nil)
	require.NoError(t, err)
	return r
}

// use puts the bundle of file into the --client-ca file.
func (r *rotation) use(t *testing.T, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(r.caFile, b, 0o600))
}
