package cli

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/demo"
)

// A token in $PIGEON_TOKEN is a default of --token, and $PIGEON_URL of
// --url, but --help must not print the token or a password in the URL:
// help text ends up in terminals, CI logs and bug reports.
func TestHelpDoesNotPrintTheTokenFromTheEnvironment(t *testing.T) {
	const secret, password = "tok-from-env-5f2c9a", "pw-in-url-7d1e"
	t.Setenv("PIGEON_TOKEN", secret)
	t.Setenv("PIGEON_URL", "https://ops:"+password+"@pigeon.example:8443")
	for _, args := range [][]string{
		{"publish", "--help"}, {"subscribe", "-h"}, {"grant", "issue", "--help"}, {"account", "list", "--help"},
		{"quarantine", "list", "--help"}, {"audit", "tail", "-h"}, {"publish", "--bogus"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var stdout, stderr strings.Builder
			Main(context.Background(), args, &stdout, &stderr)
			require.NotContains(t, stdout.String()+stderr.String(), secret)
			require.NotContains(t, stdout.String()+stderr.String(), password)
			require.Contains(t, stderr.String(), "$PIGEON_TOKEN")
			require.Contains(t, stderr.String(), "pigeon.example:8443", "the URL is shown without its password")
		})
	}
}

// The demo's bearer tokens (admin-token among them) are printed in the
// README: serve refuses to offer them on an address other machines can
// reach, unless --tokens replaces them.
func TestDemoTokensOnlyOnLoopback(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	require.NoError(t, os.WriteFile(tokens, []byte("tokens:\n  - token: t\n    principal: p\n"), 0o600))
	for _, tc := range []struct {
		addr, tokens string
		refused      bool
	}{
		{"127.0.0.1:8787", "", false},
		{"127.0.0.2:0", "", false},
		{"[::1]:8787", "", false},
		{"localhost:8787", "", false},
		{"0.0.0.0:8787", "", true},
		{":8787", "", true},
		{"[::]:8787", "", true},
		{"10.1.2.3:8787", "", true},
		{"pigeon.example.com:8787", "", true},
		{"0.0.0.0:8787", tokens, false},
	} {
		_, _, _, err := catalogAndTokens(serveConfig{addr: tc.addr, tokens: tc.tokens})
		if !tc.refused {
			require.NoError(t, err, tc.addr)
			continue
		}
		require.ErrorContains(t, err, "demo", tc.addr)
		require.ErrorContains(t, err, "--tokens", tc.addr)
	}
}

// A file anyone on the machine may write is a file anyone may change:
// tokens (add an admin), the config, the server key and the client CAs
// (trust a CA of one's own) are refused when world-writable.
func TestWorldWritableSecretFilesRefused(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	dir := t.TempDir()
	writeTestPKI(t, dir, nil)
	open := func(p string) string {
		t.Helper()
		require.NoError(t, os.Chmod(p, 0o666))
		return p
	}
	copyTo := func(src, name string) string {
		t.Helper()
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o600))
		return p
	}
	tokens := filepath.Join(dir, "tokens.yaml")
	require.NoError(t, os.WriteFile(tokens, []byte("tokens:\n  - token: t\n    principal: p\n"), 0o600))
	_, err := loadTokens(tokens)
	require.NoError(t, err)
	_, err = loadTokens(open(copyTo(tokens, "open-tokens.yaml")))
	require.ErrorContains(t, err, "world-writable")

	cfg := serveConfig{}
	require.NoError(t, loadConfig(writeConfig(t, "region: eu\n"), &cfg))
	require.ErrorContains(t, loadConfig(open(writeConfig(t, "region: eu\n")), &cfg), "world-writable")

	base := serveConfig{tlsCert: filepath.Join(dir, "server.pem"), tlsKey: filepath.Join(dir, "server-key.pem")}
	_, err = buildEdge(base, demo.Tokens(), nil)
	require.NoError(t, err)
	for _, mod := range []func(*serveConfig){
		func(c *serveConfig) { c.tlsKey = open(copyTo(c.tlsKey, "open-key.pem")) },
		func(c *serveConfig) { c.tlsCert = open(copyTo(c.tlsCert, "open-cert.pem")) },
		func(c *serveConfig) {
			c.clientCA, c.trustDomains = []string{open(copyTo(filepath.Join(dir, "ca.pem"), "open-ca.pem"))}, []string{"example.org"}
		},
		func(c *serveConfig) {
			c.trustDomains = []string{"example.org"}
			c.domainCA = map[string][]string{"example.org": {open(copyTo(filepath.Join(dir, "ca.pem"), "open-domain-ca.pem"))}}
		},
	} {
		cfg := base
		mod(&cfg)
		_, err := buildEdge(cfg, demo.Tokens(), nil)
		require.ErrorContains(t, err, "world-writable")
	}
}

// yaml.v3 quotes the start of a value it cannot decode; in the tokens file
// that value may be a bearer token (or the whole line of an env file given
// by mistake). The error keeps the line and the types, not the value.
func TestTokensFileErrorsDoNotQuoteValues(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"misplaced.yaml": "tokens:\n  - token: a\n    principal: p\n    roles: Zq8s3cr\n",
		"env-file":       "ADMIN_TOKEN=Zq8s3cr3t\n",
		"list.yaml":      "tokens:\n  - Zq8s3cr3t\n",
	} {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		_, err := loadTokens(p)
		require.ErrorContains(t, err, p+": ", name)
		require.ErrorContains(t, err, "line ", name)
		require.NotContains(t, err.Error(), "Zq8", name)
		require.NotContains(t, err.Error(), "ADMIN", name)
	}
}

// Policies decide who may publish and read: a policy directory, its
// subjects/ or schemas/, or a file in them that anyone on the machine may
// write is refused, as a tokens file is.
func TestWorldWritablePolicyFilesRefused(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	for _, open := range []string{".", "subjects", "schemas", "subjects/payments.authorize.json", "schemas/payment.authorization.v1.json"} {
		t.Run(open, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "policies")
			require.NoError(t, os.CopyFS(dir, demo.FS()))
			_, _, err := loadCatalog(dir)
			require.NoError(t, err)
			p := filepath.Join(dir, filepath.FromSlash(open))
			fi, err := os.Stat(p)
			require.NoError(t, err)
			require.NoError(t, os.Chmod(p, fi.Mode().Perm()|0o002))
			_, _, err = loadCatalog(dir)
			require.ErrorContains(t, err, "world-writable")
			require.ErrorContains(t, err, p)
		})
	}
}
