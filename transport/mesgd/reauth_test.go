package mesgd_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/identity"
	"pigeon/internal/testlog"
	"pigeon/internal/testpki"
	"pigeon/transport/mesgd"
)

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
	a, b := testpki.NewCA(t, "a"), testpki.NewCA(t, "b")
	logs := &testlog.Buffer{}
	log := logs.Logger()
	dir := t.TempDir()
	certPath, keyPath := a.ServerFiles(t, dir)
	cf, err := identity.LoadCertFile(certPath, keyPath, log)
	require.NoError(t, err)
	mtls, err := identity.NewMTLS(&identity.MTLSOptions{Required: true,
		TrustDomains: []identity.TrustDomain{{Name: "example.org", Authorities: []*x509.Certificate{a.Cert, b.Cert}}}})
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
	roots.AddCert(a.Cert)
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
	certA := a.Issue(t, reauthA)
	cA, err := dial(certA)
	require.NoError(t, err)
	cB, err := dial(b.Issue(t, reauthB))
	require.NoError(t, err)
	var kA, kB string
	// The contracts are negotiated before the connections are tracked:
	// wait for both, or Reauthenticate may run before a connection is
	// one it checks (which then checks itself, and ended counts it not).
	require.Eventually(t, func() bool {
		kA, kB = contractOf(reauthA), contractOf(reauthB)
		return kA != "" && kB != "" && mesgd.Tracked(srv) == 2
	}, 30*time.Second, 5*time.Millisecond)

	require.NoError(t, mtls.Reload([]identity.TrustDomain{{Name: "example.org", Authorities: []*x509.Certificate{b.Cert}}}))
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
