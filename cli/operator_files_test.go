//go:build unix

package cli

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"pigeon/internal/regfile/regfiletest"

	"github.com/stretchr/testify/require"
)

// mainErr runs the command line args and returns its stderr as an error
// when it failed.
func mainErr(args ...string) func() error {
	return func() error {
		var stdout, stderr bytes.Buffer
		if code := Main(context.Background(), args, &stdout, &stderr); code != 0 {
			return &cmdError{code: code, stderr: stderr.String()}
		}
		return nil
	}
}

type cmdError struct {
	code   int
	stderr string
}

func (e *cmdError) Error() string { return e.stderr }

// The files an operator names (--config, --tokens, --metrics-token-file,
// a program's --module and --manifest, the --file of publish) were read
// with os.ReadFile: a named pipe put in place of one (or named by
// mistake) held the CLI in open(2) until a writer came, and a link to
// /dev/zero was read until memory ran out; serve waited so before it
// listened, and Ctrl-C did not stop it. Each is refused at once as not a
// regular file, the error naming it.
func TestOperatorFilesRefuseANamedPipe(t *testing.T) {
	h := http.NotFoundHandler()
	for _, tc := range []struct {
		name string
		read func(file string) error
	}{
		{"--config", func(file string) error { var cfg serveConfig; return loadConfig(file, &cfg) }},
		{"--tokens", func(file string) error { _, err := loadTokens(file); return err }},
		{"--metrics-token-file", func(file string) error {
			_, err := metricsHandlerFor(serveConfig{metricsTokenFile: file}, h)
			return err
		}},
		{"publish --file", func(file string) error {
			return mainErr("publish", "--url", "http://127.0.0.1:1", "--file", file)()
		}},
		{"program deploy --module", func(file string) error {
			man := filepath.Join(filepath.Dir(file), "manifest.json")
			require.NoError(t, os.WriteFile(man, []byte(`{}`), 0o600))
			return mainErr("program", "deploy", "--url", "http://127.0.0.1:1", "--module", file, "--manifest", man, "p")()
		}},
		{"program deploy --manifest", func(file string) error {
			mod := filepath.Join(filepath.Dir(file), "module.wasm")
			require.NoError(t, os.WriteFile(mod, []byte("\x00asm"), 0o600))
			return mainErr("program", "deploy", "--url", "http://127.0.0.1:1", "--module", mod, "--manifest", file, "p")()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // unfixed, each waits out its deadline
			file := filepath.Join(t.TempDir(), "f")
			require.NoError(t, syscall.Mkfifo(file, 0o600))
			err := regfiletest.Within(t, file, func() error { return tc.read(file) })
			require.ErrorContains(t, err, "not a regular file")
			require.ErrorContains(t, err, file)
		})
	}
}

// A --config or --file of more than its bound (here a sparse file, so the
// test writes nothing) was read whole. It is refused before reading.
func TestOperatorFilesRefuseAnOversizedFile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int64
		read  func(file string) error
	}{
		{"--config", maxConfigFile, func(file string) error { var cfg serveConfig; return loadConfig(file, &cfg) }},
		{"publish --file", maxPayloadFile, func(file string) error {
			return mainErr("publish", "--url", "http://127.0.0.1:1", "--file", file)()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "f")
			require.NoError(t, os.WriteFile(file, nil, 0o600))
			require.NoError(t, os.Truncate(file, tc.limit+1))
			err := tc.read(file)
			require.ErrorContains(t, err, file)
			require.ErrorContains(t, err, "larger than")
		})
	}
}
