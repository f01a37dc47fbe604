package mesgd_test

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
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/identity"
	"pigeon/internal/testlog"
	"pigeon/transport/mesgd"
)

// reauthCA is a certificate authority of the tests of Reauthenticate.
type reauthCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var reauthSerial int64 = 7000

func newReauthCA(t *testing.T, name string) *reauthCA {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	reauthSerial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(reauthSerial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.Public(), k)
	require.NoError(t, err)
	c, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &reauthCA{cert: c, key: k}
}

// issue signs a leaf for the SPIFFE ID id (a server's, for 127.0.0.1,
// when id is "").
func (c *reauthCA) issue(t *testing.T, id string) tls.Certificate {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	reauthSerial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(reauthSerial), Subject: pkix.Name{CommonName: "leaf"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(12 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}
	if id == "" {
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		u, err := url.Parse(id)
		require.NoError(t, err)
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, k.Public(), c.key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k, Leaf: leaf}
}

const (
	reauthA = "spiffe://example.org/svc/a"
	reauthB = "spiffe://example.org/svc/b"
)

// TestReauthenticateEndsWithdrawnCertificates: a mesgd connection opened
// with a client certificate of a CA since withdrawn (the client CAs
// reloaded without it) is ended when the server checks its open
// connections again (Server.Reauthenticate): closed 1008 UNAUTHENTICATED,
// its contract revoked, and a new upgrade with it refused; one of a CA
// still trusted stays, and is still delivered what it publishes. Before,
// the connection kept its session until it closed or its contract
// expired: a revocation that waited.
func TestReauthenticateEndsWithdrawnCertificates(t *testing.T) {
	ctx := context.Background()
	a, b := newReauthCA(t, "a"), newReauthCA(t, "b")
	logs := &testlog.Buffer{}
	log := logs.Logger()
	dir := t.TempDir()
	sc := a.issue(t, "")
	kb, err := x509.MarshalPKCS8PrivateKey(sc.PrivateKey)
	require.NoError(t, err)
	certPath, keyPath := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	require.NoError(t, os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: sc.Certificate[0]}), 0o600))
	require.NoError(t, os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600))
	cf, err := identity.LoadCertFile(certPath, keyPath, log)
	require.NoError(t, err)
	mtls, err := identity.NewMTLS(&identity.MTLSOptions{Required: true,
		TrustDomains: []identity.TrustDomain{{Name: "example.org", Authorities: []*x509.Certificate{a.cert, b.cert}}}})
	require.NoError(t, err)
	rules := []pigeon.RuleSpec{{Effect: pigeon.EffectAllow, Principals: []string{reauthA, reauthB}}}
	e, err := pigeon.New(ctx, &pigeon.Options{
		Authenticator: identity.NewChain(&identity.ChainOptions{Logger: log}, identity.Method{Name: pigeon.AuthMTLS, Auth: mtls}),
		Catalog: &pigeon.Catalog{Subjects: []pigeon.SubjectPolicy{{
			Name: "chat", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"chat"},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: rules, pigeon.OpReceive: rules},
		}}},
		Logger: log,
	})
	require.NoError(t, err)
	tc, err := identity.ServerTLS(&identity.TLSOptions{Certificate: cf, MTLS: mtls, Logger: log})
	require.NoError(t, err)
	srv := mesgd.New(e, mesgd.Options{Subject: "chat", Logger: log})
	hs := &http.Server{Handler: srv, TLSConfig: tc}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- hs.ServeTLS(l, "", "") }()
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, srv.Shutdown(sctx))
		require.NoError(t, hs.Shutdown(sctx))
		<-served
		require.NoError(t, e.Shutdown(sctx))
	})

	roots := x509.NewCertPool()
	roots.AddCert(a.cert)
	dial := func(cert tls.Certificate) (*websocket.Conn, error) {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }}}}
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c, _, err := websocket.Dial(dctx, "wss://"+l.Addr().String()+"/mesgd/room=lobby",
			&websocket.DialOptions{HTTPClient: hc, Subprotocols: []string{mesgd.Subprotocol}})
		if err == nil {
			t.Cleanup(func() { _ = c.CloseNow() })
		}
		return c, err
	}
	// contractOf is the live contract of principal (one at most).
	contractOf := func(principal string) string {
		live, _, err := e.LiveContracts(ctx, 1000)
		require.NoError(t, err)
		id := ""
		for _, k := range live {
			if k.Principal == principal {
				require.Empty(t, id, "one live contract of %s", principal)
				id = k.ID
			}
		}
		return id
	}
	certA := a.issue(t, reauthA)
	cA, err := dial(certA)
	require.NoError(t, err)
	cB, err := dial(b.issue(t, reauthB))
	require.NoError(t, err)
	var kA, kB string
	require.Eventually(t, func() bool { kA, kB = contractOf(reauthA), contractOf(reauthB); return kA != "" && kB != "" },
		30*time.Second, 5*time.Millisecond)

	require.NoError(t, mtls.Reload([]identity.TrustDomain{{Name: "example.org", Authorities: []*x509.Certificate{b.cert}}}))
	ended, err := srv.Reauthenticate(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, ended)
	require.Empty(t, contractOf(reauthA), "A's contract is revoked")
	err = e.Recheck(ctx, pigeon.Caller{Principal: &pigeon.Principal{ID: reauthA}, ContractID: kA}, "chat", pigeon.OpReceive)
	require.Equal(t, pigeon.CodeContractRevoked, pigeon.ErrorCode(err), "%v", err)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, _, err = cA.Read(rctx)
	requireCloseError(t, err, websocket.StatusPolicyViolation, pigeon.CodeUnauthenticated)
	_, err = dial(certA)
	require.Error(t, err, "A's certificate is refused at its next handshake")
	require.Contains(t, logs.String(), "mesgd credential refused when checked again")

	// B's connection is left alone.
	require.Equal(t, kB, contractOf(reauthB))
	send(t, cB, `{"room":"lobby","text":"still here"}`)
	require.Equal(t, "still here", readFrame(t, cB)["text"])
	ended, err = srv.Reauthenticate(ctx)
	require.NoError(t, err)
	require.Zero(t, ended)
}
