package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon/demo"
	"pigeon/identity"
	"pigeon/internal/testlog"
	"pigeon/internal/testpki"
)

// writeTestPKI writes ca.pem, server.pem and server-key.pem into dir, and
// NAME.pem and NAME-key.pem for each client (name: SPIFFE ID).
func writeTestPKI(t *testing.T, dir string, clients map[string]string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o700))
	ca := testpki.NewCA(t, "test CA")
	testpki.WriteCerts(t, filepath.Join(dir, "ca.pem"), ca.Cert)
	cert, key := ca.Sign(t, testpki.Leaf{Server: true})
	testpki.WritePair(t, dir, "server", cert, key)
	for name, id := range clients {
		cert, key := ca.Sign(t, testpki.Leaf{SPIFFEID: id})
		testpki.WritePair(t, dir, name, cert, key)
	}
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "pigeon.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// The shipped example parses, and with its certificates made, builds.
func TestExampleIdentityConfig(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile("../examples/identity/pigeon.yaml")
	require.NoError(t, err)
	path := filepath.Join(dir, "pigeon.yaml")
	require.NoError(t, os.WriteFile(path, b, 0o600))
	writeTestPKI(t, filepath.Join(dir, "certs"), nil)

	cfg, code, ok := parseServe([]string{"--config", path}, io.Discard, nil)
	require.True(t, ok, "exit %d", code)
	require.Equal(t, "127.0.0.1:8443", cfg.addr)
	require.Equal(t, "", cfg.data)
	require.Equal(t, filepath.Join(dir, "certs/server.pem"), cfg.tlsCert)
	require.Equal(t, []string{filepath.Join(dir, "certs/ca.pem")}, cfg.clientCA)
	require.Equal(t, []string{"merchant-prod"}, cfg.trustDomains)
	require.Equal(t, "optional", cfg.mtlsMode)
	require.Len(t, cfg.issuers, 1)
	require.Equal(t, "realm_access.roles", cfg.issuers[0].RolesClaim)
	require.Equal(t, []string{"reader", "writer"}, cfg.issuers[0].Roles)
	require.Equal(t, []string{"mtls", "oidc", "grant", "token"}, cfg.authOrder)
	require.Equal(t, 20, cfg.maxFailures)
	require.Equal(t, 16384, cfg.maxConns)
	require.Equal(t, 256, cfg.maxConnsPerIP)
	require.Equal(t, 1000, cfg.maxSubs)
	require.Equal(t, 1000000, cfg.maxAccounts)
	require.Equal(t, 100000, cfg.maxRoles)
	require.Equal(t, 1000, cfg.maxGrants)

	e, err := buildEdge(cfg, demo.Tokens(), nil)
	require.NoError(t, err)
	require.NotNil(t, e.tls)
	require.NotNil(t, e.oidc)
	require.Equal(t, cfg.authOrder, e.order)
}

func TestServeFlagsOverrideConfig(t *testing.T) {
	path := writeConfig(t, "addr: 127.0.0.1:9000\nregion: eu\nmtls:\n  client_ca: [a.pem, b.pem]\n  trust_domains: [example.org]\n")
	cfg, _, ok := parseServe([]string{"--config", path, "--region", "us", "--client-ca", "/x/c.pem"}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, "127.0.0.1:9000", cfg.addr, "from the file")
	require.Equal(t, "us", cfg.region, "the flag wins")
	require.Equal(t, []string{"/x/c.pem"}, cfg.clientCA, "a list flag replaces the file's list")
	require.Equal(t, []string{"example.org"}, cfg.trustDomains)
	// A trust domain may bring its own CA bundle.
	path = writeConfig(t, "mtls:\n  client_ca: [shared.pem]\n  trust_domains:\n    - a.org\n    - name: b.org\n      ca: [b.pem]\n")
	cfg, _, ok = parseServe([]string{"--config", path}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, []string{"a.org", "b.org"}, cfg.trustDomains)
	require.Equal(t, map[string][]string{"b.org": {filepath.Join(filepath.Dir(path), "b.pem")}}, cfg.domainCA)
	// An issuer's SPIFFE trust domains.
	cfg, _, ok = parseServe([]string{"--config", writeConfig(t,
		"oidc:\n  issuers:\n    - issuer: https://idp\n      audience: [a]\n      trust_domains: [merchant-prod]\n      principal_prefix: \"idp:\"\n")}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, []string{"merchant-prod"}, cfg.issuers[0].TrustDomains)
	require.Equal(t, "idp:", cfg.issuers[0].PrincipalPrefix)
	// The client applications whose tokens sign in.
	cfg, _, ok = parseServe([]string{"--config", writeConfig(t,
		"oidc:\n  issuers:\n    - issuer: https://idp\n      audience: [a]\n      clients: [orders-app, billing]\n")}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, []string{"orders-app", "billing"}, cfg.issuers[0].Clients)
	// The longest a token may live.
	cfg, _, ok = parseServe([]string{"--config", writeConfig(t,
		"oidc:\n  issuers:\n    - issuer: https://idp\n      audience: [a]\n      max_lifetime: 1h\n")}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, time.Hour, cfg.issuers[0].MaxLifetime)

	// An empty file configures nothing.
	cfg, _, ok = parseServe([]string{"--config", writeConfig(t, "")}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, "uk", cfg.region)
}

func TestServeConfigRefused(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"addr: x\nbogus: 1\n", ":2: unknown key \"bogus\""},
		{"tls:\n  cert: a\n  kye: b\n", ":3: unknown key \"kye\""},
		{"sync: sometimes\n", ":1: sync must be batch, always or none"},
		{"shutdown_timeout: soon\n", ":1: "},
		{"mtls:\n  mode: maybe\n", ":2: mode must be required or optional"},
		{"mtls:\n  trust_domains: [ok.org, \"spiffe://bad/x\"]\n", ":2: trust domain \"spiffe://bad/x\" is not valid"},
		{"oidc:\n  issuers:\n    - issuer: https://idp\n      audience: [a]\n    - issuer: https://idp2\n      audience: [a]\n      algorithms: [HS256]\n", ":5: issuer \"https://idp2\": algorithm \"HS256\" is not allowed"},
		{"oidc:\n  issuers:\n    - issuer: https://idp\n", ":3: issuer \"https://idp\": needs at least one audience"},
		{"oidc:\n  issuers:\n    - issuer: https://idp\n      audience: [a]\n      trust_domains: [\"spiffe://x\"]\n", ":3: issuer \"https://idp\": \"spiffe://x\" is not a SPIFFE trust domain name"},
		{"oidc:\n  issuers:\n    - issuer: https://idp\n      audience: [pigeon, \"\"]\n", ":3: issuer \"https://idp\": an audience may not be empty"},
		{"oidc:\n  issuers:\n    - issuer: https://idp\n      audience: [pigeon]\n      clients: [\"\"]\n", ":3: issuer \"https://idp\": a client may not be empty"},
		{"oidc:\n  issuers:\n    - issuer: https://idp\n      audience: [pigeon]\n      max_lifetime: 9000h\n", ":3: issuer \"https://idp\": max lifetime must be between 0 and 8784h0m0s"},
		{"auth:\n  order: [mtls, kerberos]\n", ":2: unknown method \"kerberos\""},
		{"mtls:\n  trust_domains:\n    - name: a.org\n      cas: [x.pem]\n", ":4: unknown key \"cas\""},
		{"mtls:\n  trust_domains:\n    - name: A.ORG\n", ":3: trust domain \"A.ORG\" is not valid"},
		{"tls:\n  cert: a.pem\n", ":1: tls needs both cert and key"},
		{"addr: [1, 2\n", ":1: "},
	} {
		requireConfigRefused(t, tc.body, tc.want)
	}
}

// requireConfigRefused requires a config file of body to refuse the start
// (exit 2) with its path and want in the message, which it returns.
func requireConfigRefused(t *testing.T, body, want string) string {
	t.Helper()
	var stderr strings.Builder
	path := writeConfig(t, body)
	_, code, ok := parseServe([]string{"--config", path}, &stderr, nil)
	require.False(t, ok, body)
	require.Equal(t, 2, code)
	require.Contains(t, stderr.String(), path+want, body)
	return stderr.String()
}

func TestServeRefusesBadIdentityFiles(t *testing.T) {
	dir := t.TempDir()
	writeTestPKI(t, dir, nil)
	bad := filepath.Join(dir, "bad.pem")
	require.NoError(t, os.WriteFile(bad, []byte("garbage"), 0o600))
	base := serveConfig{tlsCert: filepath.Join(dir, "server.pem"), tlsKey: filepath.Join(dir, "server-key.pem")}
	for _, tc := range []struct {
		mod  func(*serveConfig)
		want string
	}{
		{func(c *serveConfig) { c.tlsCert = bad }, bad + ": not a PEM certificate"},
		{func(c *serveConfig) { c.tlsKey = bad }, bad + ": not a PEM private key"},
		{func(c *serveConfig) { c.tlsKey = filepath.Join(dir, "missing.pem") }, "missing.pem: no such file"},
		{func(c *serveConfig) { c.clientCA, c.trustDomains = []string{bad}, []string{"example.org"} }, bad + ": no PEM certificate"},
		{func(c *serveConfig) { c.clientCA = []string{filepath.Join(dir, "ca.pem")} }, "--client-ca needs at least one --trust-domain"},
		{func(c *serveConfig) { c.tlsCert, c.tlsKey, c.clientCA = "", "", []string{filepath.Join(dir, "ca.pem")} }, "--client-ca needs TLS"},
		{func(c *serveConfig) {
			c.clientCA, c.trustDomains, c.authOrder = []string{filepath.Join(dir, "ca.pem")}, []string{"example.org"}, []string{"token", "mtls"}
		}, "mtls comes first"},
		{func(c *serveConfig) { c.authOrder = []string{"oidc"} }, "\"oidc\" is not configured"},
		{func(c *serveConfig) {
			c.issuers = []identity.Issuer{{URL: "https://a.example", Audiences: []string{"x"}}, {URL: "https://b.example", Audiences: []string{"x"}}}
		}, "distinct principal_prefix"},
	} {
		cfg := base
		tc.mod(&cfg)
		_, err := buildEdge(cfg, demo.Tokens(), nil)
		require.ErrorContains(t, err, tc.want)
		require.NotContains(t, err.Error(), "garbage")
	}
	// Only the configured methods, in the default order.
	e, err := buildEdge(serveConfig{}, demo.Tokens(), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"grant", "token"}, e.order)
	require.Nil(t, e.tls)
}

// pigeon serve over TLS with mTLS (optional), and the CLI with --tls-ca,
// --tls-cert and --tls-key: a publish and a subscription authenticated by
// certificates alone, a bearer token instead of a certificate, and a client
// that does not trust the server's CA.
func TestServeTLSWithCLI(t *testing.T) {
	dir := t.TempDir()
	writeTestPKI(t, dir, map[string]string{"orders": demo.Orders, "notifier": demo.Notifier})
	file := func(name string) string { return filepath.Join(dir, name) }
	r := startServe(t, serveConfig{tlsCert: file("server.pem"), tlsKey: file("server-key.pem"), clientCA: []string{file("ca.pem")},
		trustDomains: []string{"merchant-prod"}, mtlsMode: "optional"})
	require.Contains(t, r.out.String(), "https://")
	require.Contains(t, r.out.String(), "wss://")
	require.Contains(t, r.out.String(), "authentication: mtls, grant, token")
	r.url = strings.Replace(r.url, "http://", "https://", 1)
	ctx := context.Background()

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lines := &testlog.Buffer{}
	subDone := make(chan int, 1)
	subErr := &testlog.Buffer{}
	go func() {
		subDone <- Main(sctx, []string{"subscribe", "--url", r.url, "--tls-ca", file("ca.pem"), "--tls-cert", file("notifier.pem"),
			"--tls-key", file("notifier-key.pem"), "--subject", "notifications.send", "--start", "first"}, lines, subErr)
	}()
	publish := func(key string, auth ...string) (int, string, string) {
		args := append([]string{"publish", "--subject", "notifications.send", "--type", "notification.requested", "--intent", "send_notification",
			"--key", key, "--classification", "pii", "--data", `{"recipientId":"cust-42","channel":"email","templateId":"t"}`}, auth...)
		return r.pigeon(t, ctx, args...)
	}
	code, stdout, stderr := publish("k-1", "--tls-ca", file("ca.pem"), "--tls-cert", file("orders.pem"), "--tls-key", file("orders-key.pem"))
	require.Equal(t, 0, code, stderr)
	var res struct{ Message struct{ ID string } }
	require.NoError(t, json.Unmarshal([]byte(stdout), &res))
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(lines.String(), res.Message.ID) {
		require.True(t, time.Now().Before(deadline), "subscribe printed %q, %q", lines.String(), subErr.String())
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	require.Equal(t, 0, <-subDone)

	code, _, stderr = publish("k-2", "--tls-ca", file("ca.pem"), "--token", "orders-token")
	require.Equal(t, 0, code, stderr)
	code, _, stderr = publish("k-3", "--token", "orders-token")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "certificate")
	code, _, stderr = publish("k-4", "--tls-ca", file("ca.pem"))
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "UNAUTHENTICATED")
}

// A browser page on another origin opens /v1/ws (and gets CORS headers,
// server.TestCORS) only when --allowed-origins
// names it; the server's own origin always may. Bad patterns are refused
// at start, from the flag and from the file.
func TestServeWebSocketOrigins(t *testing.T) {
	dial := func(t *testing.T, url, origin string) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		h := http.Header{"Origin": {origin}, "Authorization": {"Bearer orders-token"}}
		c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http")+"/v1/ws",
			&websocket.DialOptions{HTTPHeader: h, Subprotocols: []string{"pigeon.v1"}})
		if c != nil {
			_ = c.CloseNow()
		}
		if resp == nil {
			return 0, err
		}
		return resp.StatusCode, err
	}
	closed := startServe(t, serveConfig{})
	code, err := dial(t, closed.url, "http://app.example.com")
	require.Error(t, err)
	require.Equal(t, http.StatusForbidden, code)
	code, err = dial(t, closed.url, closed.url)
	require.NoError(t, err, "the server's own origin")
	require.Equal(t, http.StatusSwitchingProtocols, code)

	open := startServe(t, serveConfig{allowedOrigins: []string{"app.example.com", "*.tools.example:8443"}})
	for _, o := range []string{"http://app.example.com", "https://ci.tools.example:8443"} {
		code, err = dial(t, open.url, o)
		require.NoError(t, err, o)
		require.Equal(t, http.StatusSwitchingProtocols, code, o)
	}
	code, err = dial(t, open.url, "http://evil.example.com")
	require.Error(t, err)
	require.Equal(t, http.StatusForbidden, code)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--allowed-origins", "[bad"}, "--allowed-origins: origin pattern \"[bad\" is not valid"},
		{[]string{"--allowed-origins", "app.example.com/path"}, "without a path"},
		{[]string{"--config", writeConfig(t, "allowed_origins: [ok.example, \"https://x/y\"]\n")}, ":1: origin pattern \"https://x/y\""},
		{[]string{"--config", writeConfig(t, "allowed_origins: [\"\"]\n")}, ":1: an empty origin pattern"},
	} {
		var stderr strings.Builder
		_, code, ok := parseServe(tc.args, &stderr, nil)
		require.False(t, ok, tc.args)
		require.Equal(t, 2, code)
		require.Contains(t, stderr.String(), tc.want)
	}
}
