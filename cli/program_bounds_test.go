package cli

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestServeProgramBounds: serve --program-max-hops,
// --program-max-descendants and --program-lineage-size (program_max_hops,
// program_max_descendants, program_lineage_size in the config file) reach
// the programs.Manager's options; 0 leaves the defaults, a negative bound
// means none, and a negative lineage size is refused at start. Before,
// an operator of the binary could not change them.
func TestServeProgramBounds(t *testing.T) {
	cfg, _, ok := parseServe([]string{"--program-max-hops", "3", "--program-max-descendants", "500", "--program-lineage-size", "1024"}, io.Discard, nil)
	require.True(t, ok)
	o := cfg.programOptions(nil, nil)
	require.Equal(t, 3, o.MaxHops)
	require.EqualValues(t, 500, o.MaxDescendants)
	require.Equal(t, 1024, o.LineageSize)

	cfg, _, ok = parseServe(nil, io.Discard, nil)
	require.True(t, ok)
	o = cfg.programOptions(nil, nil)
	require.Zero(t, o.MaxHops, "the Manager's default")
	require.Zero(t, o.MaxDescendants)
	require.Zero(t, o.LineageSize)

	var stderr strings.Builder
	_, code, ok := parseServe([]string{"--program-lineage-size", "-1"}, &stderr, nil)
	require.False(t, ok)
	require.Equal(t, 2, code)
	require.Contains(t, stderr.String(), "--program-lineage-size")

	file := filepath.Join(t.TempDir(), "pigeon.yaml")
	require.NoError(t, os.WriteFile(file, []byte("program_max_hops: -1\nprogram_max_descendants: -1\nprogram_lineage_size: 4096\n"), 0o600))
	cfg, _, ok = parseServe([]string{"--config", file}, io.Discard, nil)
	require.True(t, ok)
	o = cfg.programOptions(nil, nil)
	require.Equal(t, -1, o.MaxHops)
	require.EqualValues(t, -1, o.MaxDescendants)
	require.Equal(t, 4096, o.LineageSize)

	require.NoError(t, os.WriteFile(file, []byte("\nprogram_lineage_size: -5\n"), 0o600))
	stderr.Reset()
	_, code, ok = parseServe([]string{"--config", file}, &stderr, nil)
	require.False(t, ok)
	require.Equal(t, 2, code)
	require.Contains(t, stderr.String(), ":2:", "the file's line")
}
