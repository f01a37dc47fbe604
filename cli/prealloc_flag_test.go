package cli

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// serve --no-preallocate and the config key no_preallocate reach the
// write-ahead log: its segments end with their records while it is open.
func TestServeNoPreallocate(t *testing.T) {
	cfg, _, ok := parseServe([]string{"--no-preallocate"}, io.Discard, nil)
	require.True(t, ok)
	require.True(t, cfg.noPreallocate)
	cfg, _, ok = parseServe(nil, io.Discard, nil)
	require.True(t, ok)
	require.False(t, cfg.noPreallocate, "preallocation is the default")

	conf := filepath.Join(t.TempDir(), "pigeon.yaml")
	require.NoError(t, os.WriteFile(conf, []byte("no_preallocate: true\n"), 0o600))
	cfg, _, ok = parseServe([]string{"--config", conf}, io.Discard, nil)
	require.True(t, ok)
	require.True(t, cfg.noPreallocate)
}
