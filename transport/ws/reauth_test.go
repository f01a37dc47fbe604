package ws_test

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
	"pigeon/demo"
	"pigeon/identity"
	"pigeon/internal/testlog"
	"pigeon/internal/testpki"
	"pigeon/transport/ws"
)

const (
	reauthSubject = "reauth.events"
	reauthA       = "spiffe://example.org/svc/a"
	reauthB       = "spiffe://example.org/svc/b"
)

// mtlsEnv is a WebSocket server over TLS whose clients authenticate with
// certificates of CA a or CA b, each of trust domain example.org.
type mtlsEnv struct {
	e    *pigeon.Engine
	srv  *ws.Server
	mtls *identity.MTLS
	a, b *testpki.CA
	url  string
	logs *testlog.Buffer
}

func newMTLSEnv(t *testing.T) *mtlsEnv {
	t.Helper()
	ctx := context.Background()
	v := &mtlsEnv{a: testpki.NewCA(t, "a"), b: testpki.NewCA(t, "b"), logs: &testlog.Buffer{}}
	log := v.logs.Logger()
	dir := t.TempDir()
	certPath, keyPath := v.a.ServerFiles(t, dir)
	cf, err := identity.LoadCertFile(certPath, keyPath, log)
	require.NoError(t, err)
	v.mtls, err = identity.NewMTLS(&identity.MTLSOptions{Required: true,
		TrustDomains: []identity.TrustDomain{{Name: "example.org", Authorities: []*x509.Certificate{v.a.Cert, v.b.Cert}}}})
	require.NoError(t, err)
	chain := identity.NewChain(&identity.ChainOptions{Logger: log}, identity.Method{Name: pigeon.AuthMTLS, Auth: v.mtls})
	catalog := demo.Catalog()
	everyone := []string{reauthA, reauthB}
	catalog.Subjects = append(catalog.Subjects, pigeon.SubjectPolicy{
		Name: reauthSubject, Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"record"},
		Policy: map[pigeon.Operation][]pigeon.RuleSpec{
			pigeon.OpPublish: {{Effect: "allow", Principals: everyone}},
			pigeon.OpReceive: {{Effect: "allow", Principals: everyone}},
		},
	})
	v.e, err = pigeon.New(ctx, &pigeon.Options{Authenticator: chain, Catalog: catalog, Region: "uk", Logger: log})
	require.NoError(t, err)
	tc, err := identity.ServerTLS(&identity.TLSOptions{Certificate: cf, MTLS: v.mtls, Logger: log})
	require.NoError(t, err)
	v.srv = ws.NewServer(v.e, &ws.Options{Logger: log})
	mux := http.NewServeMux()
	mux.Handle("/v1/ws", v.srv)
	hs := &http.Server{Handler: mux, TLSConfig: tc, ErrorLog: nil}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- hs.ServeTLS(l, "", "") }()
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, v.srv.Shutdown(sctx))
		require.NoError(t, hs.Shutdown(sctx))
		<-served
		require.NoError(t, v.e.Shutdown(sctx))
	})
	v.url = "wss://" + l.Addr().String() + "/v1/ws"
	return v
}

// client is the TLS configuration of a client that trusts the server (A's
// certificate) and presents cert.
func (v *mtlsEnv) client(cert tls.Certificate) *tls.Config {
	roots := x509.NewCertPool()
	roots.AddCert(v.a.Cert)
	return &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }}
}

// liveContract reports whether id is among the engine's live contracts.
func liveContract(t *testing.T, e *pigeon.Engine, id string) bool {
	t.Helper()
	live, _, err := e.LiveContracts(context.Background(), 1000)
	require.NoError(t, err)
	for _, l := range live {
		if l.ID == id {
			return true
		}
	}
	return false
}

// TestReauthenticateEndsWithdrawnCertificates: a WebSocket connection
// opened with a client certificate of a CA since withdrawn (the client
// CAs reloaded without it) is ended when the server checks its open
// connections again (Server.Reauthenticate): closed 1008 UNAUTHENTICATED,
// every contract it negotiated revoked (its subscription ended), and its
// reconnection refused; one of a CA still trusted stays, its contract
// live. Before, the connection kept its session until it closed or its
// contract expired: a revocation that waited.
func TestReauthenticateEndsWithdrawnCertificates(t *testing.T) {
	ctx := context.Background()
	v := newMTLSEnv(t)
	dial := func(cert tls.Certificate) *ws.Session {
		s, err := ws.Dial(ctx, v.url, "", []string{reauthSubject}, ws.WithTLS(v.client(cert)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		return s
	}
	certA := v.a.Issue(t, reauthA)
	sA, sB := dial(certA), dial(v.b.Issue(t, reauthB))
	kA, kB := sA.Contract().ID(), sB.Contract().ID()
	// A connection that negotiated twice: both its contracts are revoked.
	r := (&env{url: v.url}).rawWith(t, &websocket.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{TLSClientConfig: v.client(certA)}}})
	first, second := r.negotiate(reauthSubject).ID, r.negotiate(reauthSubject).ID
	require.NotEqual(t, first, second)
	_, err := sA.Subscribe(ctx, reauthSubject, func(context.Context, *pigeon.Delivery) error { return nil })
	require.NoError(t, err)
	subB, err := sB.Subscribe(ctx, reauthSubject, func(context.Context, *pigeon.Delivery) error { return nil })
	require.NoError(t, err)

	require.NoError(t, v.mtls.Reload([]identity.TrustDomain{{Name: "example.org", Authorities: []*x509.Certificate{v.b.Cert}}}))
	// The reload alone changes nothing for a connection already open.
	_, err = sA.Renew(ctx)
	require.NoError(t, err, "A's connection is still up after the reload")

	ended, err := v.srv.Reauthenticate(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, ended, "A's two connections")
	require.Equal(t, websocket.StatusPolicyViolation, r.closeStatus())
	select {
	case <-sA.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("A's connection stayed up")
	}
	// The close's reason is the refusal's code, and A's session ends with
	// it: a credential to replace, not a connection to redial.
	require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(sA.Err()), "%v", sA.Err())
	require.ErrorIs(t, sA.Err(), pigeon.ErrUnauthenticated)
	_, err = sA.Renew(ctx)
	require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err), "a later call: %v", err)
	require.False(t, liveContract(t, v.e, kA), "A's contract is revoked")
	require.False(t, liveContract(t, v.e, first), "the raw connection's first contract is revoked")
	require.False(t, liveContract(t, v.e, second), "the raw connection's second contract is revoked")
	err = v.e.Recheck(ctx, pigeon.Caller{Principal: &pigeon.Principal{ID: reauthA}, ContractID: kA}, reauthSubject, pigeon.OpReceive)
	require.Equal(t, pigeon.CodeContractRevoked, pigeon.ErrorCode(err), "%v", err)
	require.Error(t, sA.Reconnect(ctx), "A's certificate is refused at its next handshake")
	require.Contains(t, v.logs.String(), "websocket credential refused when checked again")
	records, err := v.e.Audit(ctx, 0, 1000)
	require.NoError(t, err)
	revoked := map[string]bool{}
	for _, r := range records {
		if r.Type == string(pigeon.EventContractRevoked) && r.Principal == reauthA {
			revoked[r.ContractID] = true
		}
	}
	require.Equal(t, map[string]bool{first: true, second: true, kA: true}, revoked, "each revocation is audited")

	// B's connection is left alone.
	require.True(t, liveContract(t, v.e, kB))
	require.NoError(t, sB.Err())
	select {
	case <-subB.Done():
		t.Fatal("B's subscription ended")
	default:
	}
	_, err = sB.Renew(ctx)
	require.NoError(t, err)
	ended, err = v.srv.Reauthenticate(ctx)
	require.NoError(t, err)
	require.Zero(t, ended, "nothing left to end")
	require.NoError(t, sB.Err())
}
