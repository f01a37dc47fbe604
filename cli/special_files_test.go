//go:build unix

package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/demo"
	"pigeon/internal/regfile/regfiletest"
)

// `pigeon audit verify` and `audit receipts` on a copied data directory
// whose last audit segment an attacker replaced by a named pipe hung in
// the open, waiting for a writer. Both end now with exit code 1 and an
// error that names the file, leaving the directory as it was.
func TestAuditCommandsRefuseANamedPipeSegment(t *testing.T) {
	for _, args := range [][]string{{"audit", "verify"}, {"audit", "receipts", "aud_1"}} {
		t.Run(args[1], func(t *testing.T) {
			dir, _ := auditDir(t, 3, nil)
			segs, err := filepath.Glob(filepath.Join(dir, "audit", "0*"))
			require.NoError(t, err)
			require.NotEmpty(t, segs)
			tail := segs[len(segs)-1]
			require.NoError(t, os.Remove(tail))
			require.NoError(t, syscall.Mkfifo(tail, 0o600))
			names := func() []string {
				var out []string
				require.NoError(t, filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
					out = append(out, p)
					return err
				}))
				return out
			}
			before := names()

			var stdout, stderr bytes.Buffer
			code := regfiletest.Within(t, tail, func() int {
				return Main(context.Background(), append(args[:2:2], append([]string{"--data", dir}, args[2:]...)...), &stdout, &stderr)
			})
			require.Equal(t, 1, code, "stdout %q, stderr %q", stdout.String(), stderr.String())
			require.Contains(t, stderr.String(), tail)
			require.Contains(t, stderr.String(), "not a regular file")
			require.Equal(t, before, names())
		})
	}
}

// A policy directory handed over with a named pipe (or a link to
// /dev/zero) among its subject files made `policy lint`, `catalog
// asyncapi` and serve wait for a writer forever (or read without end);
// SIGINT and SIGTERM did not stop them, the open never returning. Such a
// file is refused before anything is read, as POLICY_INVALID naming it.
func TestPolicyToolsRefuseFilesThatAreNotRegular(t *testing.T) {
	for _, kind := range []string{"named pipe", "link to /dev/zero"} {
		if t.Failed() {
			// Unchecked, /dev/zero is read until memory runs out.
			t.Skip("the named pipe was not refused")
		}
		dir := filepath.Join(t.TempDir(), "policies")
		require.NoError(t, os.CopyFS(dir, demo.FS()))
		file := filepath.Join(dir, "subjects", "zz.json")
		if kind == "named pipe" {
			require.NoError(t, syscall.Mkfifo(file, 0o600))
		} else {
			require.NoError(t, os.Symlink("/dev/zero", file))
		}
		for _, args := range [][]string{
			{"policy", "lint", dir},
			{"catalog", "asyncapi", dir},
			{"serve", "--policies", dir, "--tokens", filepath.Join(dir, "none.yaml"), "--data", "", "--addr", "127.0.0.1:0"},
		} {
			t.Run(kind+" "+args[0], func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel() // were serve to start, it stops at once
				var stdout, stderr bytes.Buffer
				code := regfiletest.Within(t, file, func() int { return Main(ctx, args, &stdout, &stderr) })
				require.Equal(t, 1, code, "stdout %q, stderr %q", stdout.String(), stderr.String())
				require.Contains(t, stderr.String(), "POLICY_INVALID")
				require.Contains(t, stderr.String(), file)
				require.Contains(t, stderr.String(), "not a regular file")
			})
		}
	}
}
