package identity_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/identity"
	"pigeon/internal/testlog"
	"pigeon/server"
	"pigeon/transport/ws"
)

const (
	writer  = "spiffe://example.org/svc/writer"
	subject = "edge.events"
)

// edge is a broker served over TLS with mTLS, OIDC, grant and static
// tokens, on 127.0.0.1.
type edge struct {
	e       *pigeon.Engine
	srv     *server.Server
	addr    string
	dir     string
	root    *ca
	other   *ca
	caPath  string
	cert    *identity.CertFile
	certPth string
	keyPth  string
	p       *idp
	logs    *testlog.Buffer
	limiter *identity.Limiter
}

func edgeCatalog() *pigeon.Catalog {
	c := demo.Catalog()
	c.Subjects = append(c.Subjects, pigeon.SubjectPolicy{
		Name: subject, Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"record"},
		Policy: map[pigeon.Operation][]pigeon.RuleSpec{
			pigeon.OpPublish: {{Effect: "allow", Principals: []string{"user-1", "svc-static"}}},
		},
	})
	return c
}

func newEdge(t *testing.T, required bool) *edge { t.Helper(); return newEdgeLimit(t, required, 1000) }

// newEdgeLimit is newEdge with maxFailures per address and minute.
func newEdgeLimit(t *testing.T, required bool, maxFailures int) *edge {
	t.Helper()
	ctx := context.Background()
	f := &edge{dir: t.TempDir(), root: newCA(t, "root"), other: newCA(t, "other"), p: newIDP(t), logs: &testlog.Buffer{}}
	f.caPath = filepath.Join(f.dir, "ca.pem")
	writeCert(t, f.caPath, f.root.cert)
	sc, sk := f.root.issue(t, leafOpts{server: true, spiffeID: "spiffe://example.org/pigeon"})
	f.certPth, f.keyPth = writePair(t, f.dir, "server", sc, sk)
	f.p.addKey(t, "ec-1", jose.ES256, true)

	log := f.logs.Logger()
	var err error
	f.cert, err = identity.LoadCertFile(f.certPth, f.keyPth, log)
	require.NoError(t, err)
	cas, err := identity.LoadCAFiles(f.caPath)
	require.NoError(t, err)
	mtls, err := identity.NewMTLS(&identity.MTLSOptions{Required: required, TrustDomains: []identity.TrustDomain{{Name: "example.org", Authorities: cas}}})
	require.NoError(t, err)
	oidc, err := identity.NewOIDC(&identity.OIDCOptions{Logger: log, Issuers: []identity.Issuer{{URL: f.p.srv.URL, Audiences: []string{"pigeon"}, JWKSURL: f.p.srv.URL + "/jwks", RolesClaim: "roles"}}})
	require.NoError(t, err)
	// As pigeon serve wires it: the limiter counts failed handshakes, the
	// engine refused credentials.
	f.limiter = identity.NewLimiter(&identity.LimiterOptions{MaxFailures: maxFailures})
	chain := identity.NewChain(&identity.ChainOptions{Logger: log},
		identity.Method{Name: pigeon.AuthMTLS, Auth: mtls},
		identity.Method{Name: pigeon.AuthOIDC, Auth: oidc},
		identity.Method{Name: pigeon.AuthGrant, Auth: identity.Bearer(pigeon.GrantTokens())},
		identity.Method{Name: pigeon.AuthToken, Auth: identity.Lookup(pigeon.NewStaticTokens(append(demo.Tokens(), pigeon.StaticToken{Token: "static-1", Principal: "svc-static"})...))},
	)
	f.e, err = pigeon.New(ctx, &pigeon.Options{Authenticator: chain, Catalog: edgeCatalog(), Region: "uk", Logger: log})
	require.NoError(t, err)
	_, err = f.e.PutRole(ctx, pigeon.Role{Name: "edge-writer", Permissions: []pigeon.Permission{{Subject: subject, Operations: []pigeon.Operation{pigeon.OpPublish, pigeon.OpReceive}}}})
	require.NoError(t, err)
	_, err = f.e.CreateAccount(ctx, pigeon.Account{ID: writer, Roles: []string{"edge-writer"}, Attributes: map[string]string{"team": "edge"}})
	require.NoError(t, err)

	tc, err := identity.ServerTLS(&identity.TLSOptions{Certificate: f.cert, MTLS: mtls, Limiter: f.limiter, Logger: log})
	require.NoError(t, err)
	f.srv = server.New(f.e, &server.Options{TLS: tc, Logger: log})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f.addr = l.Addr().String()
	served := make(chan error, 1)
	go func() { served <- f.srv.Serve(l) }()
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, f.srv.Shutdown(sctx))
		require.ErrorIs(t, <-served, http.ErrServerClosed)
		require.NoError(t, f.e.Shutdown(sctx))
	})
	return f
}

// client returns a client TLS configuration trusting the test CA, with the
// leaf (if any) as its certificate.
func (f *edge) client(t *testing.T, leaf *x509.Certificate, key *ecdsa.PrivateKey) *tls.Config {
	t.Helper()
	files := ws.TLSFiles{CA: f.caPath}
	if leaf != nil {
		files.Cert, files.Key = writePair(t, t.TempDir(), "client", leaf, key)
	}
	c, err := ws.ClientTLS(files)
	require.NoError(t, err)
	if leaf != nil {
		// Send the certificate even when the server's CA list does not name
		// its issuer (Go's client would otherwise send none), as an attacker
		// would.
		cert := c.Certificates[0]
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	return c
}

// get sends GET path with tc and an optional bearer token.
func (f *edge) get(t *testing.T, tc *tls.Config, bearer, path string) (*http.Response, error) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, "https://"+f.addr+path, nil)
	require.NoError(t, err)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := hc.Do(req)
	if err == nil {
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

// negotiated returns the contract.negotiated audit records of principal.
func (f *edge) negotiated(t *testing.T, principal string) []pigeon.AuditRecord {
	t.Helper()
	recs, err := f.e.Audit(context.Background(), 0, 10000)
	require.NoError(t, err)
	var out []pigeon.AuditRecord
	for _, r := range recs {
		if r.Type == string(pigeon.EventContractNegotiated) && r.Principal == principal {
			out = append(out, r)
		}
	}
	return out
}

func TestEdgeWSSWithClientCertificate(t *testing.T) {
	f := newEdge(t, false)
	ctx := context.Background()
	leaf, key := f.root.issue(t, leafOpts{spiffeID: writer})
	s, err := ws.Dial(ctx, "wss://"+f.addr, "", []string{subject}, ws.WithTLS(f.client(t, leaf, key)))
	require.NoError(t, err)
	defer s.Close(ctx)
	info := s.Contract().Info()
	require.Equal(t, writer, info.Principal)
	require.Equal(t, pigeon.AuthMTLS, info.Auth)
	require.Equal(t, []string{"edge-writer"}, info.Roles)
	_, err = s.Publish(ctx, &pigeon.Message{Type: "e", Subject: subject, Intent: "record", Data: []byte(`{"n":1}`)})
	require.NoError(t, err)
	msgs, err := s.Receive(ctx, subject, 10)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	recs, err := f.e.Audit(ctx, 0, 10000)
	require.NoError(t, err)
	accepted := false
	for _, r := range recs {
		if r.Type == string(pigeon.EventPublishAccepted) && r.MessageID == msgs[0].ID {
			require.Equal(t, writer, r.Principal, "the principal comes from the certificate, never from the message")
			accepted = true
		}
	}
	require.True(t, accepted)

	neg := f.negotiated(t, writer)
	require.NotEmpty(t, neg)
	require.Equal(t, "auth:mtls", neg[0].Ref)
	raw, err := json.Marshal(info)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"auth":"mtls"`)
}

func TestEdgeHTTPSBearerMethods(t *testing.T) {
	f := newEdge(t, false)
	ctx := context.Background()
	tc := f.client(t, nil, nil)
	grant, err := f.e.IssueGrant(ctx, writer, []string{"edge-writer"}, time.Hour)
	require.NoError(t, err)
	for _, tc2 := range []struct {
		name, token, principal string
		method                 pigeon.AuthMethod
	}{
		{"static", "static-1", "svc-static", pigeon.AuthToken},
		{"oidc", f.p.sign(t, "ec-1", f.p.good("user-1")), "user-1", pigeon.AuthOIDC},
		{"grant", grant.Token, writer, pigeon.AuthGrant},
	} {
		s, err := ws.Dial(ctx, "wss://"+f.addr, tc2.token, []string{subject}, ws.WithTLS(tc))
		require.NoError(t, err, tc2.name)
		info := s.Contract().Info()
		require.Equal(t, tc2.principal, info.Principal, tc2.name)
		require.Equal(t, tc2.method, info.Auth, tc2.name)
		require.NoError(t, s.Close(ctx))
		recs := f.negotiated(t, tc2.principal)
		require.Equal(t, "auth:"+string(tc2.method), recs[len(recs)-1].Ref, tc2.name)
	}
	// HTTPS API with a bearer token.
	resp, err := f.get(t, tc, "static-1", "/v1/contracts/none")
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "authenticated; the contract is not the caller's")
	resp, err = f.get(t, tc, "", "/v1/contracts/none")
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	// An expired token is refused, and nothing of it is logged.
	c := f.p.good("user-1")
	c["exp"] = time.Now().Add(-time.Hour).Unix()
	_, err = ws.Dial(ctx, "wss://"+f.addr, f.p.sign(t, "ec-1", c), []string{subject}, ws.WithTLS(tc))
	require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err))
	// A plain-text client cannot talk to the TLS server.
	_, err = ws.Dial(ctx, "ws://"+f.addr, "static-1", []string{subject})
	require.Error(t, err)
	requireNoSecrets(t, f.logs.String())
	require.NotContains(t, f.logs.String(), grant.Token)
}

func TestEdgeClientCertificates(t *testing.T) {
	f := newEdge(t, false)
	ctx := context.Background()
	now := time.Now()
	cases := []struct {
		name string
		mint func() (*x509.Certificate, *ecdsa.PrivateKey)
		ok   bool
	}{
		{"good", func() (*x509.Certificate, *ecdsa.PrivateKey) { return f.root.issue(t, leafOpts{spiffeID: writer}) }, true},
		{"wrong trust domain", func() (*x509.Certificate, *ecdsa.PrivateKey) {
			return f.root.issue(t, leafOpts{spiffeID: "spiffe://evil.org/svc/writer"})
		}, false},
		{"expired", func() (*x509.Certificate, *ecdsa.PrivateKey) {
			return f.root.issue(t, leafOpts{spiffeID: writer, notBefore: now.Add(-2 * time.Hour), notAfter: now.Add(-time.Hour)})
		}, false},
		{"not yet valid", func() (*x509.Certificate, *ecdsa.PrivateKey) {
			return f.root.issue(t, leafOpts{spiffeID: writer, notBefore: now.Add(time.Hour), notAfter: now.Add(2 * time.Hour)})
		}, false},
		{"another CA", func() (*x509.Certificate, *ecdsa.PrivateKey) { return f.other.issue(t, leafOpts{spiffeID: writer}) }, false},
		{"no SAN", func() (*x509.Certificate, *ecdsa.PrivateKey) { return f.root.issue(t, leafOpts{}) }, false},
		{"not a SPIFFE URI", func() (*x509.Certificate, *ecdsa.PrivateKey) {
			return f.root.issue(t, leafOpts{spiffeID: "https://example.org/svc/writer"})
		}, false},
	}
	for _, tc := range cases {
		leaf, key := tc.mint()
		s, err := ws.Dial(ctx, "wss://"+f.addr, "", []string{subject}, ws.WithTLS(f.client(t, leaf, key)))
		if tc.ok {
			require.NoError(t, err, tc.name)
			require.Equal(t, writer, s.Contract().Info().Principal)
			require.NoError(t, s.Close(ctx))
			continue
		}
		require.Error(t, err, tc.name)
		// A refused certificate is refused even with a good bearer token: it
		// is not passed on to the next method.
		_, err = f.get(t, f.client(t, leaf, key), "static-1", "/v1/contracts/none")
		require.Error(t, err, tc.name)
	}
	require.GreaterOrEqual(t, f.limiter.Stats().HandshakeFailures, int64(2*(len(cases)-1)))
	require.Contains(t, f.logs.String(), "TLS client certificate refused")
	requireNoSecrets(t, f.logs.String())
}

func TestEdgeMTLSRequired(t *testing.T) {
	f := newEdge(t, true)
	ctx := context.Background()
	// No certificate: the handshake fails, whatever the token.
	_, err := f.get(t, f.client(t, nil, nil), "static-1", "/v1/contracts/none")
	require.Error(t, err)
	require.Contains(t, f.logs.String(), "no client certificate, and one is required")
	_, err = ws.Dial(ctx, "wss://"+f.addr, "static-1", []string{subject}, ws.WithTLS(f.client(t, nil, nil)))
	require.Error(t, err)
	// With one, the certificate's principal is the caller.
	leaf, key := f.root.issue(t, leafOpts{spiffeID: writer})
	s, err := ws.Dial(ctx, "wss://"+f.addr, "", []string{subject}, ws.WithTLS(f.client(t, leaf, key)))
	require.NoError(t, err)
	require.Equal(t, pigeon.AuthMTLS, s.Contract().Info().Auth)
	require.NoError(t, s.Close(ctx))
}

func TestEdgeMTLSOptionalFallsBackToBearer(t *testing.T) {
	f := newEdge(t, false)
	resp, err := f.get(t, f.client(t, nil, nil), "static-1", "/v1/contracts/none")
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "authenticated; the contract is not the caller's")
	resp, err = f.get(t, f.client(t, nil, nil), "", "/v1/contracts/none")
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

func TestEdgeMTLSRoleRevocation(t *testing.T) {
	f := newEdge(t, false)
	ctx := context.Background()
	leaf, key := f.root.issue(t, leafOpts{spiffeID: writer})
	s, err := ws.Dial(ctx, "wss://"+f.addr, "", []string{subject}, ws.WithTLS(f.client(t, leaf, key)))
	require.NoError(t, err)
	defer s.Close(ctx)
	msg := func() *pigeon.Message {
		return &pigeon.Message{Type: "e", Subject: subject, Intent: "record", Data: []byte(`{"n":1}`)}
	}
	_, err = s.Publish(ctx, msg())
	require.NoError(t, err)
	_, err = f.e.RemoveAccountRole(ctx, writer, "edge-writer")
	require.NoError(t, err)
	_, err = s.Publish(ctx, msg())
	require.Equal(t, pigeon.CodeGrantRevoked, pigeon.ErrorCode(err), "%v", err)
	// A new connection with the same certificate no longer gets the subject.
	_, err = ws.Dial(ctx, "wss://"+f.addr, "", []string{subject}, ws.WithTLS(f.client(t, leaf, key)))
	require.Equal(t, pigeon.CodeNoPermittedSubjects, pigeon.ErrorCode(err), "%v", err)
}

func TestEdgeCertificateReload(t *testing.T) {
	f := newEdge(t, false)
	ctx := context.Background()
	serialOf := func() string {
		conn, err := tls.Dial("tcp", f.addr, f.client(t, nil, nil))
		require.NoError(t, err)
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	first := serialOf()
	// A connection open across the reload keeps working.
	s, err := ws.Dial(ctx, "wss://"+f.addr, "static-1", []string{subject}, ws.WithTLS(f.client(t, nil, nil)))
	require.NoError(t, err)
	defer s.Close(ctx)

	// A bad new file keeps the old certificate and says why.
	require.NoError(t, os.WriteFile(f.certPth, []byte("not a certificate"), 0o600))
	require.Error(t, f.cert.Reload())
	require.Equal(t, first, serialOf())
	require.Contains(t, f.logs.String(), "server certificate not reloaded")

	// A good new pair is picked up without a restart.
	sc, sk := f.root.issue(t, leafOpts{server: true})
	writePair(t, f.dir, "server", sc, sk)
	require.Eventually(t, func() bool { return serialOf() == sc.SerialNumber.String() }, 30*time.Second, 100*time.Millisecond)
	_, err = s.Publish(ctx, &pigeon.Message{Type: "e", Subject: subject, Intent: "record", Data: []byte(`{}`)})
	require.NoError(t, err)
	requireNoSecrets(t, f.logs.String())
}

// A Limiter given to a Chain (deprecated) still limits what the chain
// refuses.
func TestEdgeFailuresRateLimited(t *testing.T) {
	lim := identity.NewLimiter(&identity.LimiterOptions{MaxFailures: 3, Window: time.Minute})
	logs := &testlog.Buffer{}
	chain := identity.NewChain(&identity.ChainOptions{Limiter: lim, Logger: logs.Logger()},
		identity.Method{Name: pigeon.AuthToken, Auth: identity.Lookup(pigeon.NewStaticTokens(pigeon.StaticToken{Token: "good", Principal: "p"}))})
	cred := func(tok, addr string) error {
		_, err := chain.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: tok, RemoteAddr: addr})
		return err
	}
	for range 3 {
		require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(cred("bad", "198.51.100.7:1000")))
	}
	require.Equal(t, pigeon.CodeRateLimited, pigeon.ErrorCode(cred("good", "198.51.100.7:2000")), "the address is limited, whatever it sends")
	require.NoError(t, cred("good", "198.51.100.8:1000"), "other addresses are not")
	require.Equal(t, pigeon.CodeRateLimited, pigeon.ErrorCode(cred("good", "198.51.100.7:2001")))
	require.EqualValues(t, 3, lim.Stats().Failures)
	require.EqualValues(t, 2, lim.Stats().Limited)
	require.Equal(t, 1, strings.Count(logs.String(), "refused for the rest of the window"), "one log line per address and window")
}

func TestEdgeBadCertificateFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "server.pem")
	require.NoError(t, os.WriteFile(bad, []byte("-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n"), 0o600))
	_, err := identity.LoadCertFile(bad, filepath.Join(dir, "key.pem"), nil)
	require.Error(t, err)
	require.Contains(t, err.Error(), filepath.Join(dir, "key.pem"))
	_, err = identity.LoadCAFiles(filepath.Join(dir, "missing.pem"))
	require.ErrorContains(t, err, "missing.pem")
	_, err = identity.LoadCAFiles(bad)
	require.ErrorContains(t, err, bad)
	require.False(t, strings.Contains(err.Error(), "nope"))
	require.False(t, errors.Is(err, os.ErrNotExist))
}

// A Chain without a Limiter counts nothing and refuses nothing for its
// count: locking out a source is the engine's, which sees every refused
// credential once (pigeon.Options.AuthFailureLimit).
func TestChainLeavesLockoutToEngine(t *testing.T) {
	chain := identity.NewChain(nil,
		identity.Method{Name: pigeon.AuthToken, Auth: identity.Lookup(pigeon.NewStaticTokens(pigeon.StaticToken{Token: "good", Principal: "p"}))})
	for range identity.DefaultMaxFailures + 5 {
		_, err := chain.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: "bad", RemoteAddr: "198.51.100.7:1000"})
		require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err))
	}
	p, err := chain.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: "good", RemoteAddr: "198.51.100.7:1000"})
	require.NoError(t, err)
	require.Equal(t, "p", p.ID)
}

// Over TLS, as pigeon serve wires it, a refused bearer token is counted
// by the engine alone: it takes nothing from the handshake limit, so the
// client goes on being answered (401, then the engine's 429 with
// Retry-After) rather than having its handshakes refused.
func TestEdgeRefusedTokenCountsOnce(t *testing.T) {
	f := newEdgeLimit(t, false, 2)
	for range 4 {
		resp, err := f.get(t, f.client(t, nil, nil), "guess", "/v1/contracts/none")
		require.NoError(t, err, "the handshake is not refused for refused tokens")
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	resp, err := f.get(t, f.client(t, nil, nil), "static-1", "/v1/contracts/none")
	require.NoError(t, err)
	require.NotEqual(t, http.StatusUnauthorized, resp.StatusCode)
	require.NotEqual(t, http.StatusTooManyRequests, resp.StatusCode)
	st := f.limiter.Stats()
	require.Zero(t, st.Failures)
	require.Zero(t, st.Limited)
}

// Failed handshakes count against the address; past the limit even a good
// certificate's handshake is refused until the window ends.
func TestEdgeHandshakesRateLimited(t *testing.T) {
	f := newEdgeLimit(t, false, 2)
	bad, badKey := f.other.issue(t, leafOpts{spiffeID: writer})
	for range 2 {
		_, err := f.get(t, f.client(t, bad, badKey), "", "/v1/contracts/none")
		require.Error(t, err)
	}
	good, goodKey := f.root.issue(t, leafOpts{spiffeID: writer})
	_, err := f.get(t, f.client(t, good, goodKey), "", "/v1/contracts/none")
	require.Error(t, err)
	st := f.limiter.Stats()
	require.EqualValues(t, 2, st.HandshakeFailures)
	require.EqualValues(t, 1, st.Limited)
	require.Contains(t, f.logs.String(), "TLS handshakes refused for the rest of the window")
}

// Each trust domain verifies against its own bundle: the CA of one domain
// cannot mint identities of another.
func TestMTLSTrustDomainBundles(t *testing.T) {
	caA, caB := newCA(t, "a"), newCA(t, "b")
	m, err := identity.NewMTLS(&identity.MTLSOptions{TrustDomains: []identity.TrustDomain{
		{Name: "a.org", Authorities: []*x509.Certificate{caA.cert}}, {Name: "b.org", Authorities: []*x509.Certificate{caB.cert}}}})
	require.NoError(t, err)
	for _, tc := range []struct {
		ca *ca
		id string
		ok bool
	}{
		{caA, "spiffe://a.org/x", true}, {caB, "spiffe://b.org/y", true},
		{caA, "spiffe://b.org/y", false}, {caB, "spiffe://a.org/x", false}, {caA, "spiffe://c.org/z", false},
	} {
		leaf, _ := tc.ca.issue(t, leafOpts{spiffeID: tc.id})
		id, err := m.Verify([]*x509.Certificate{leaf})
		if tc.ok {
			require.NoError(t, err, tc.id)
			require.Equal(t, tc.id, id.String())
		} else {
			require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err), tc.id)
		}
	}
	_, err = identity.NewMTLS(&identity.MTLSOptions{TrustDomains: []identity.TrustDomain{{Name: "spiffe://a.org", Authorities: []*x509.Certificate{caA.cert}}}})
	require.Error(t, err)
}
