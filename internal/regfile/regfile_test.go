//go:build unix

package regfile_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/internal/regfile"
)

// TestOpen: a regular file (or a link to one) opens with its FileInfo; a
// named pipe, a device and a directory are refused at once, wrapping
// ErrNotRegular and naming the path.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, []byte("data"), 0o600))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(file, link))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	zero := filepath.Join(dir, "zero")
	require.NoError(t, os.Symlink("/dev/zero", zero))

	for _, p := range []string{file, link} {
		f, fi, err := regfile.Open(p)
		require.NoError(t, err)
		require.EqualValues(t, 4, fi.Size())
		require.NoError(t, f.Close())
	}
	for _, p := range []string{fifo, zero, dir} {
		done := make(chan error, 1)
		go func() { _, _, err := regfile.Open(p); done <- err }()
		select {
		case err := <-done:
			require.ErrorIs(t, err, regfile.ErrNotRegular, p)
			require.Contains(t, err.Error(), p)
		case <-time.After(10 * time.Second):
			t.Fatalf("Open blocked on %s", p)
		}
	}
	_, _, err := regfile.Open(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
