//go:build unix

package policy

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"pigeon/internal/regfile/regfiletest"

	"github.com/stretchr/testify/require"
)

// catalogDir writes a catalog of one valid subject and returns its root.
func catalogDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "subjects"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "schemas"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "subjects", "a.json"),
		[]byte(`{"name":"a.b","version":"v1","intents":["x"]}`), 0o644))
	return dir
}

var dirLoaders = []struct {
	name string
	load func(string) error
}{
	{"LoadDir", func(dir string) error { _, err := LoadDir(dir); return err }},
	{"LintDir", func(dir string) error { _, err := LintDir(dir); return err }},
}

// A catalog directory handed over by someone else held a named pipe among
// subjects/*.json or schemas/*.json: LoadDir and LintDir opened it and
// waited for a writer that never came (the CLI checked the type first,
// but a program embedding the package did not, and between the check and
// the read the file could change). A link to /dev/zero was read until
// memory ran out. Both are refused, without blocking, as not regular
// files, and the error names the file.
func TestLoadDirRefusesFilesThatAreNotRegular(t *testing.T) {
	for _, kind := range []string{"named pipe in subjects", "named pipe in schemas", "link to /dev/zero"} {
		for _, l := range dirLoaders {
			t.Run(kind+" "+l.name, func(t *testing.T) {
				dir := catalogDir(t)
				file := filepath.Join(dir, "subjects", "zz.json")
				switch kind {
				case "named pipe in subjects":
					require.NoError(t, syscall.Mkfifo(file, 0o600))
				case "named pipe in schemas":
					file = filepath.Join(dir, "schemas", "s.json")
					require.NoError(t, syscall.Mkfifo(file, 0o600))
				default:
					require.NoError(t, os.Symlink("/dev/zero", file))
				}
				err := regfiletest.Within(t, file, func() error { return l.load(dir) })
				require.ErrorIs(t, err, ErrNotRegularFile)
				var pe *Error
				require.ErrorAs(t, err, &pe)
				require.Equal(t, file, pe.File)
				require.Contains(t, err.Error(), file)
			})
			if t.Failed() {
				// Unchecked, /dev/zero is read until memory runs out.
				t.Skip("a named pipe was not refused")
			}
		}
	}
}

// A policy or schema file of more than MaxFileSize bytes (here a sparse
// one, so the test writes nothing) was read whole. It is refused before
// reading with a *FileTooLargeError naming the file; a file of exactly
// MaxFileSize bytes is read (and here fails to parse).
func TestLoadDirRefusesAnOversizedFile(t *testing.T) {
	for _, l := range dirLoaders {
		for _, sub := range []string{"subjects", "schemas"} {
			t.Run(l.name+" "+sub, func(t *testing.T) {
				dir := catalogDir(t)
				file := filepath.Join(dir, sub, "big.json")
				require.NoError(t, os.WriteFile(file, []byte("{"), 0o644))
				require.NoError(t, os.Truncate(file, MaxFileSize+1))
				err := l.load(dir)
				var big *FileTooLargeError
				require.ErrorAs(t, err, &big, "%v", err)
				require.Equal(t, file, big.File)
				require.EqualValues(t, MaxFileSize, big.Limit)
				var pe *Error
				require.ErrorAs(t, err, &pe)
				require.Equal(t, file, pe.File)

				require.NoError(t, os.Truncate(file, MaxFileSize))
				err = l.load(dir)
				require.Error(t, err)
				require.False(t, errors.As(err, &big), "%v", err)
			})
		}
	}
}
