package cli

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// A misspelt rule field ("principal" for "principals") was a warning:
// serve logged it and started with a rule that allowed every principal to
// receive the subject. It is refused now, as POLICY_INVALID, naming the
// file and the field, and nothing of the catalog is served.
func TestServeRefusesUnknownRuleField(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	require.NoError(t, os.CopyFS(dir, demo.FS()))
	file := filepath.Join(dir, "subjects", "payments.authorize.json")
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Contains(t, string(b), `"principals"`)
	// Every rule of the subject loses its "principals" to a misspelling.
	require.NoError(t, os.WriteFile(file, []byte(strings.ReplaceAll(string(b), `"principals"`, `"principles"`)), 0o644))

	_, _, err = loadCatalog(dir)
	require.Error(t, err)
	var pe *pigeon.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, pigeon.CodePolicyInvalid, pe.Code)
	require.ErrorContains(t, err, "payments.authorize.json")
	require.ErrorContains(t, err, "principles")

	var stdout, stderr strings.Builder
	require.Equal(t, 1, Main(context.Background(), []string{"policy", "lint", dir}, &stdout, &stderr))
	require.Contains(t, stdout.String(), "unknown rule field")
}

// A negative --shutdown-timeout was taken (the config file's
// shutdown_timeout refuses it), and every shutdown then gave up at once on
// the work in flight. It is a usage error, before anything starts.
func TestServeNegativeShutdownTimeoutRefused(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // were it to start, it stops at once
	var stdout, stderr strings.Builder
	code := Main(ctx, []string{"serve", "--data", "", "--addr", "127.0.0.1:0", "--shutdown-timeout", "-1s"}, &stdout, &stderr)
	require.Equal(t, 2, code)
	require.Contains(t, stderr.String(), "--shutdown-timeout")
	require.NotContains(t, stdout.String(), "DEMO MODE", "nothing is served")
}

// A malformed --url (or $PIGEON_URL) was quoted whole in the error, with
// the password of its user info: "parse \"http://ops:pw@ho st/…\"".
// The error says what is wrong with the URL without showing it.
func TestMalformedURLErrorHidesThePassword(t *testing.T) {
	const password = "pw-Secret1"
	for _, u := range []string{"http://ops:" + password + "@ho st:1/", "ht!tp://ops:" + password + "@x/", "http://ops:" + password + "@[::1"} {
		for _, args := range [][]string{
			{"publish", "--subject", "a", "--data", "{}"}, {"audit", "tail"}, {"quarantine", "list"}, {"account", "list"},
		} {
			t.Run(args[0]+" "+u, func(t *testing.T) {
				var stdout, stderr strings.Builder
				code := Main(context.Background(), append(args, "--url", u, "--token", "t"), &stdout, &stderr)
				require.Equal(t, 1, code)
				require.NotContains(t, stdout.String()+stderr.String(), password)
				require.Contains(t, stderr.String(), "INVALID_ARGUMENT")
				require.Contains(t, stderr.String(), "--url")
			})
		}
	}
}

// A tokens file or a TLS key that every user of the machine may read hands
// any local user every bearer token (or the server's identity). Refusing
// it would break files checked out of version control (0644), so serve
// starts but says so, naming the file and the fix, never the token.
func TestServeWarnsOfSecretFilesOthersMayRead(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	dir := t.TempDir()
	writeTestPKI(t, dir, nil)
	tokens := filepath.Join(dir, "tokens.yaml")
	require.NoError(t, os.WriteFile(tokens, []byte("tokens:\n  - token: tok-Readable-9\n    principal: p\n"), 0o600))
	key := filepath.Join(dir, "server-key.pem")

	quiet := startServe(t, serveConfig{tokens: tokens, tlsCert: filepath.Join(dir, "server.pem"), tlsKey: key})
	quiet.stop()
	require.NotContains(t, quiet.errOut.String(), "readable")

	require.NoError(t, os.Chmod(tokens, 0o644))
	require.NoError(t, os.Chmod(key, 0o644))
	r := startServe(t, serveConfig{tokens: tokens, tlsCert: filepath.Join(dir, "server.pem"), tlsKey: key})
	r.stop()
	logs := r.errOut.String()
	require.Contains(t, logs, tokens)
	require.Contains(t, logs, key)
	require.Contains(t, logs, "chmod")
	require.NotContains(t, logs+r.out.String(), "tok-Readable-9")
}

// serve refused a catalog with lint errors with an untyped error, though
// the broker (and docs/policy.md) call that refusal POLICY_INVALID, with
// the file, subject, field and every error problem in its details.
func TestServeLintRefusalIsTyped(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	require.NoError(t, os.CopyFS(dir, demo.FS()))
	file := filepath.Join(dir, "subjects", "payments.authorize.json")
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, []byte(strings.Replace(string(b), `"effect": "allow"`, `"effect": "permit"`, 1)), 0o644))

	_, _, err = loadCatalog(dir)
	var pe *pigeon.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, pigeon.CodePolicyInvalid, pe.Code)
	require.Equal(t, "subjects/payments.authorize.json", pe.Details["file"])
	require.Equal(t, "payments.authorize", pe.Details["subject"])
	require.Contains(t, pe.Details["field"], ".effect")
	require.Contains(t, err.Error(), "permit")
}

// yaml.v3 truncated a number with a fraction into an integer setting, so
// "max_connections_per_ip: 0.5" became 0, which means no cap at all. Such
// a value is refused with its line, as a misspelt key is.
func TestServeConfigFractionForIntegerRefused(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"max_connections_per_ip: 0.5\n", ":1: "},
		{"region: eu\nmax_subscriptions: 10.5\n", ":2: "},
		{"auth:\n  max_failures: 0.9\n", ":2: "},
		{"max_read_memory_mb: 1.5\n", ":1: "},
		{"max_groups: &g 2.5\nmax_programs: *g\n", ":1: "},
	} {
		require.Contains(t, requireConfigRefused(t, tc.body, tc.want), "not an integer", tc.body)
	}
	cfg, _, ok := parseServe([]string{"--config", writeConfig(t, "max_connections: 1e3\nws_publish_rate: 0.5\n")}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, 1000, cfg.maxConns)
	require.Equal(t, 0.5, cfg.wsPublishRate)
}
