package cli

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// serve --max-accounts, --max-roles and --max-grants-per-account (or
// max_accounts, max_roles and max_grants_per_account in the config file)
// are the directory's quotas, pigeon.Options.MaxAccounts, MaxRoles and
// MaxGrantsPerAccount: each is parsed from the flag and from the file, a
// flag given wins over the file, a value that is not an integer is a
// usage error (exit 2), and none given leaves the engine's default (0).
func TestServeDirectoryQuotaSettings(t *testing.T) {
	for _, tc := range []struct {
		flag, key string
		got       func(cfg serveConfig) int
	}{
		{"--max-accounts", "max_accounts", func(cfg serveConfig) int { return cfg.maxAccounts }},
		{"--max-roles", "max_roles", func(cfg serveConfig) int { return cfg.maxRoles }},
		{"--max-grants-per-account", "max_grants_per_account", func(cfg serveConfig) int { return cfg.maxGrants }},
	} {
		t.Run(tc.key, func(t *testing.T) {
			cfg, _, ok := parseServe(nil, io.Discard, nil)
			require.True(t, ok)
			require.Zero(t, tc.got(cfg), "none given: the engine's default")
			cfg, _, ok = parseServe([]string{tc.flag, "3"}, io.Discard, nil)
			require.True(t, ok)
			require.Equal(t, 3, tc.got(cfg))
			_, code, ok := parseServe([]string{tc.flag, "lots"}, io.Discard, nil)
			require.False(t, ok)
			require.Equal(t, 2, code)

			file := filepath.Join(t.TempDir(), "pigeon.yaml")
			require.NoError(t, os.WriteFile(file, []byte(tc.key+": -1\n"), 0o600))
			cfg, _, ok = parseServe([]string{"--config", file}, io.Discard, nil)
			require.True(t, ok)
			require.Equal(t, -1, tc.got(cfg), "negative: no quota")
			cfg, _, ok = parseServe([]string{"--config", file, tc.flag, "7"}, io.Discard, nil)
			require.True(t, ok)
			require.Equal(t, 7, tc.got(cfg), "the flag wins over the file")

			require.NoError(t, os.WriteFile(file, []byte(tc.key+": lots\n"), 0o600))
			_, code, ok = parseServe([]string{"--config", file}, io.Discard, nil)
			require.False(t, ok, "a file value that is not an integer is refused")
			require.Equal(t, 2, code)
		})
	}
}

// A served broker started with --max-accounts 1, --max-roles 1 and
// --max-grants-per-account 1 refuses, over the HTTP API, the second
// account, the second role and an account's second live grant with
// INVALID_ARGUMENT, while a role defined is redefined and a revoked grant
// frees its place.
func TestServeDirectoryQuotasRefuse(t *testing.T) {
	t.Setenv("PIGEON_TOKEN", "admin-token")
	ctx := context.Background()
	r := startServe(t, serveConfig{maxAccounts: 1, maxRoles: 1, maxGrants: 1})
	roleFile := filepath.Join(t.TempDir(), "notify.json")
	require.NoError(t, os.WriteFile(roleFile, []byte(notifyRole), 0o600))
	const id = "spiffe://merchant-prod/ns/shop/sa/notify-api"
	ok := func(args ...string) string {
		t.Helper()
		exit, stdout, stderr := r.pigeon(t, ctx, args...)
		require.Equal(t, 0, exit, stderr)
		return stdout
	}
	refused := func(args ...string) {
		t.Helper()
		exit, stdout, stderr := r.pigeon(t, ctx, args...)
		require.Empty(t, stdout)
		requireRefused(t, cmdName(args), pigeon.CodeInvalidArgument, exit, stderr)
	}

	ok("role", "put", "notify", "--file", roleFile)
	refused("role", "put", "reader", "--file", roleFile)
	ok("role", "put", "notify", "--file", roleFile) // redefined whatever their number

	ok("account", "create", id, "--role", "notify")
	refused("account", "create", "spiffe://merchant-prod/ns/shop/sa/other")

	first := ok("grant", "issue", "--account", id, "--role", "notify")
	refused("grant", "issue", "--account", id, "--role", "notify")
	var issued struct{ JTI string }
	require.NoError(t, json.Unmarshal([]byte(first), &issued), first)
	ok("grant", "revoke", issued.JTI)
	ok("grant", "issue", "--account", id, "--role", "notify") // the revoked grant freed its place

	ok("account", "delete", id)
	ok("account", "create", "spiffe://merchant-prod/ns/shop/sa/other") // the deleted account freed its place
}
