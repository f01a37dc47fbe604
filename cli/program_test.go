package cli

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/demo"
)

// okModule is the smallest program: pigeon_alloc returns 1024 and
// pigeon_handle returns 0 (acknowledges), with one page of memory.
var okModule = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
	0x01, 0x0c, 0x02, 0x60, 0x01, 0x7f, 0x01, 0x7f, 0x60, 0x02, 0x7f, 0x7f, 0x01, 0x7f, // types
	0x03, 0x03, 0x02, 0x00, 0x01, // functions
	0x05, 0x03, 0x01, 0x00, 0x01, // memory: min 1
	0x07, 0x29, 0x03, // exports
	0x0c, 'p', 'i', 'g', 'e', 'o', 'n', '_', 'a', 'l', 'l', 'o', 'c', 0x00, 0x00,
	0x0d, 'p', 'i', 'g', 'e', 'o', 'n', '_', 'h', 'a', 'n', 'd', 'l', 'e', 0x00, 0x01,
	0x06, 'm', 'e', 'm', 'o', 'r', 'y', 0x02, 0x00,
	0x0a, 0x0c, 0x02, 0x05, 0x00, 0x41, 0x80, 0x08, 0x0b, 0x04, 0x00, 0x41, 0x00, 0x0b, // code
}

// pigeon program deploy|list|show|remove|rollback against a running serve; the
// program is bound again when serve starts again on the same data.
func TestProgramCommands(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	wasm, manifest := filepath.Join(dir, "ok.wasm"), filepath.Join(dir, "ok.json")
	require.NoError(t, os.WriteFile(wasm, okModule, 0o600))
	require.NoError(t, os.WriteFile(manifest, []byte(`{"route":{"subject":"payments.authorize"},"account":"`+demo.Gateway+`"}`), 0o600))
	data := filepath.Join(dir, "data")
	r := startServe(t, serveConfig{data: data})
	createAccount(t, r.url, demo.Gateway)

	code, _, stderr := r.pigeon(t, ctx, "program", "deploy", "ok", "--module", wasm, "--manifest", manifest, "--token", "checkout-token")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "FORBIDDEN")
	code, stdout, stderr := r.pigeon(t, ctx, "program", "deploy", "ok", "--module", wasm, "--manifest", manifest, "--token", "admin-token")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `"version": 1`)
	code, _, stderr = r.pigeon(t, ctx, "program", "deploy", "bad", "--module", manifest, "--manifest", manifest, "--token", "admin-token")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "PROGRAM_INVALID")
	code, _, _ = r.pigeon(t, ctx, "program", "deploy", "ok", "--token", "admin-token")
	require.Equal(t, 2, code, "--module and --manifest are required")
	code, _, stderr = r.pigeon(t, ctx, "program", "deploy", "ok", "--module", wasm, "--manifest", manifest, "--token", "admin-token")
	require.Equal(t, 0, code, stderr)
	code, stdout, stderr = r.pigeon(t, ctx, "program", "rollback", "ok", "--token", "admin-token")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `"version": 3`)
	require.Contains(t, stdout, `"rollbackOf": 1`)
	code, _, stderr = r.pigeon(t, ctx, "program", "rollback", "ok", "--version", "9", "--token", "admin-token")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "PROGRAM_NOT_FOUND")
	r.stop()

	r = startServe(t, serveConfig{data: data})
	code, stdout, stderr = r.pigeon(t, ctx, "program", "list", "--token", "admin-token")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, 1, strings.Count(stdout, "\n"), stdout)
	require.Contains(t, stdout, `"bound":true`, "bound again at start")
	code, stdout, _ = r.pigeon(t, ctx, "program", "show", "ok", "--token", "admin-token")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, demo.Gateway)
	code, _, stderr = r.pigeon(t, ctx, "program", "remove", "ok", "--token", "admin-token")
	require.Equal(t, 0, code, stderr)
	code, _, stderr = r.pigeon(t, ctx, "program", "show", "ok", "--token", "admin-token")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "PROGRAM_NOT_FOUND")
}

// createAccount creates the account id through the server at url.
func createAccount(t *testing.T, url, id string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/accounts", strings.NewReader(`{"id":"`+id+`"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer admin-token")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
}

// serve --program-versions (or program_versions in the config file)
// bounds the versions kept for rollbacks.
func TestServeProgramVersions(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg, _, ok := parseServe([]string{"--program-versions", "3"}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, 3, cfg.programVersions)
	_, code, ok := parseServe([]string{"--program-versions", "-1"}, io.Discard, nil)
	require.False(t, ok)
	require.Equal(t, 2, code)
	file := filepath.Join(dir, "pigeon.yaml")
	require.NoError(t, os.WriteFile(file, []byte("program_versions: 1\n"), 0o600))
	cfg, _, ok = parseServe([]string{"--config", file}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, 1, cfg.programVersions)

	wasm, manifest := filepath.Join(dir, "ok.wasm"), filepath.Join(dir, "ok.json")
	require.NoError(t, os.WriteFile(wasm, okModule, 0o600))
	require.NoError(t, os.WriteFile(manifest, []byte(`{"route":{"subject":"payments.authorize"},"account":"`+demo.Gateway+`"}`), 0o600))
	r := startServe(t, serveConfig{programVersions: 1})
	createAccount(t, r.url, demo.Gateway)
	for range 2 {
		code, _, stderr := r.pigeon(t, ctx, "program", "deploy", "ok", "--module", wasm, "--manifest", manifest, "--token", "admin-token")
		require.Equal(t, 0, code, stderr)
	}
	code, _, stderr := r.pigeon(t, ctx, "program", "rollback", "ok", "--token", "admin-token")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "PROGRAM_VERSION_PRUNED", "only the current version keeps its module")
}

// serve --mesgd-subject (or mesgd_subject in the config file) serves
// mesgd's format at /mesgd/.
func TestServeMesgdSubject(t *testing.T) {
	cfg, _, ok := parseServe([]string{"--mesgd-subject", "payments.authorize"}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, "payments.authorize", cfg.mesgdSubject)
	r := startServe(t, serveConfig{mesgdSubject: "payments.authorize"})
	resp, err := http.Get(r.url + "/mesgd/kind=chat")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the endpoint is served (and wants a credential)")
	r2 := startServe(t, serveConfig{})
	resp, err = http.Get(r2.url + "/mesgd/kind=chat")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "not served without the flag")
}
