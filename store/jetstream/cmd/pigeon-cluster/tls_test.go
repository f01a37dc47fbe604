package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/internal/testlog"
)

// writeCert writes a self-signed certificate for 127.0.0.1 and its key
// into dir, and returns their paths.
func writeCert(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pigeon-cluster test"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.Public(), k)
	require.NoError(t, err)
	kb, err := x509.MarshalPKCS8PrivateKey(k)
	require.NoError(t, err)
	cert, key = filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	require.NoError(t, os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600))
	return cert, key
}

// A cluster node serves with serve's edge flags: with --tls-cert and
// --tls-key over a one-node JetStream it answers over HTTPS, and a message
// published through it is stored in JetStream.
func TestServeTLS(t *testing.T) {
	natsURL := runServer(t)
	cert, key := writeCert(t, t.TempDir())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out, errOut := &testlog.Buffer{}, &testlog.Buffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--store", natsURL, "--node", "n1", "--replicas", "1", "--addr", "127.0.0.1:0",
			"--tls-cert", cert, "--tls-key", key, "--shutdown-timeout", "10s"}, out, errOut)
	}()
	health := regexp.MustCompile(`health +(https://\S+)/health`)
	var base string
	deadline := time.Now().Add(30 * time.Second)
	for base == "" {
		select {
		case code := <-done:
			t.Fatalf("serve ended with %d: %s", code, errOut.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "no banner: %q %q", out.String(), errOut.String())
		if m := health.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.Contains(t, out.String(), "store: node n1 of NATS JetStream cluster "+natsURL)

	pem, err := os.ReadFile(cert)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pem))
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer c.CloseIdleConnections()
	res, err := c.Get(base + "/health")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)

	var pubOut, pubErr testlog.Buffer
	code := run(ctx, []string{"publish", "--url", base, "--tls-ca", cert, "--token", "orders-token", "--subject", "notifications.send",
		"--type", "notification.requested", "--intent", "send_notification", "--key", "k-1", "--classification", "pii",
		"--data", `{"recipientId":"cust-42","channel":"email","templateId":"t"}`}, &pubOut, &pubErr)
	require.Equal(t, 0, code, pubErr.String())
	require.Contains(t, pubOut.String(), `"sequence": 1`)

	cancel()
	require.Equal(t, 0, <-done, errOut.String())
	require.Contains(t, out.String(), "pigeon: stopped cleanly")
}
