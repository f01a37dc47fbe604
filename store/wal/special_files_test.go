//go:build unix

package wal

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/storetest"
)

// auditOnlyStore writes a closed store in a new directory whose audit log
// holds n chained records over several segments.
func auditOnlyStore(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir, &Options{SegmentSize: 4096, Sync: SyncNone})
	require.NoError(t, err)
	require.NoError(t, s.AppendAudit(t.Context(), storetest.Chain(n)...))
	require.NoError(t, s.Close(t.Context()))
	return dir
}

// treeState is what a read-only tool must leave as it found it: every
// entry's name, type, size and modification time.
func treeState(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		out[p] = fi.Mode().String() + " " + fi.ModTime().String()
		if fi.Mode().IsRegular() {
			out[p] += " " + strconv.FormatInt(fi.Size(), 10)
		}
		return nil
	}))
	return out
}

// replaceWithFIFO puts a named pipe where path was. The returned func
// opens and closes its write end, which lets an open blocked on it go on
// (and its reads end).
func replaceWithFIFO(t *testing.T, path string) func() {
	t.Helper()
	require.NoError(t, os.RemoveAll(path))
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	return func() {
		if f, err := os.OpenFile(path, os.O_RDWR, 0); err == nil {
			f.Close()
		}
	}
}

// An offline tool handed a data directory (`pigeon audit verify`, `audit
// receipts`) opened every segment, the checkpoint and the CLEAN marker
// with a plain open and read: one of them replaced by a named pipe made
// the open wait for a writer that never comes, and the tool hung (as did
// Open, so serve). A segment replaced by a link to /dev/zero or by a
// directory read as an empty segment. Each is refused now, as damage
// naming the file, without blocking; nothing in the directory changes.
func TestAuditToolsRefuseFilesThatAreNotRegular(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) (path string, unblock func())
		ok    bool   // the chain still verifies (the marker counts by its presence)
		why   string // else the error says so
	}{
		{"tail segment is a named pipe", func(t *testing.T, dir string) (string, func()) {
			ss := segs(t, auditDir(dir))
			return ss[len(ss)-1].path, replaceWithFIFO(t, ss[len(ss)-1].path)
		}, false, "not a regular file"},
		{"first segment is a named pipe", func(t *testing.T, dir string) (string, func()) {
			p := segs(t, auditDir(dir))[0].path
			return p, replaceWithFIFO(t, p)
		}, false, "not a regular file"},
		{"checkpoint is a named pipe", func(t *testing.T, dir string) (string, func()) {
			return checkpointPath(dir), replaceWithFIFO(t, checkpointPath(dir))
		}, false, "not a regular file"},
		{"audit directory is a named pipe", func(t *testing.T, dir string) (string, func()) {
			return auditDir(dir), replaceWithFIFO(t, auditDir(dir))
		}, false, "not a directory"},
		{"CLEAN marker is a named pipe", func(t *testing.T, dir string) (string, func()) {
			return cleanPath(dir), replaceWithFIFO(t, cleanPath(dir))
		}, true, ""},
		{"tail segment links to /dev/zero", func(t *testing.T, dir string) (string, func()) {
			ss := segs(t, auditDir(dir))
			p := ss[len(ss)-1].path
			require.NoError(t, os.Remove(p))
			require.NoError(t, os.Symlink("/dev/zero", p))
			return p, func() {}
		}, false, "not a regular file"},
		{"tail segment is a directory", func(t *testing.T, dir string) (string, func()) {
			ss := segs(t, auditDir(dir))
			p := ss[len(ss)-1].path
			require.NoError(t, os.Remove(p))
			require.NoError(t, os.Mkdir(p, 0o700))
			return p, func() {}
		}, false, "not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := auditOnlyStore(t, 60)
			require.Greater(t, len(segs(t, auditDir(dir))), 2)
			if tt.name == "checkpoint is a named pipe" {
				require.NoFileExists(t, checkpointPath(dir))
			}
			path, unblock := tt.setup(t, dir)
			before := treeState(t, dir)

			type result struct {
				n   uint64
				err error
			}
			done := make(chan result, 1)
			go func() {
				n, err := VerifyAudit(dir)
				done <- result{n, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(20 * time.Second):
				unblock()
				<-done
				t.Fatalf("VerifyAudit blocked on %s", path)
			}
			require.Equal(t, before, treeState(t, dir), "a read-only tool changed the directory")
			if tt.ok {
				require.NoError(t, r.err)
				require.Equal(t, uint64(60), r.n)
				return
			}
			require.ErrorContains(t, r.err, path)
			require.ErrorContains(t, r.err, tt.why)
			if tt.why == "not a regular file" {
				var ce *store.CorruptError
				require.ErrorAs(t, r.err, &ce)
				require.Equal(t, path, ce.File)
			}

			// Open (serve) refuses it too, rather than hanging.
			go func() {
				s, err := Open(dir, nil)
				if err == nil {
					err = errors.Join(errors.New("opened"), s.Close(t.Context()))
				}
				done <- result{0, err}
			}()
			select {
			case r = <-done:
			case <-time.After(20 * time.Second):
				unblock()
				<-done
				t.Fatalf("Open blocked on %s", path)
			}
			require.ErrorContains(t, r.err, tt.why)
		})
	}
}

// The offline tools read the CLEAN marker whole, twice, to tell whether a
// store opened the directory meanwhile: a marker made huge (or a link to
// a device that never ends) took that much memory. Its text is a few
// dozen bytes; the tools read a bounded prefix of it.
func TestCleanStampReadsABoundedPrefix(t *testing.T) {
	dir := auditOnlyStore(t, 3)
	want := cleanStamp(dir)
	require.NotEmpty(t, want)
	require.Less(t, len(want), maxCleanStamp)

	f, err := os.OpenFile(cleanPath(dir), os.O_WRONLY, 0)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(256<<20)) // sparse: no disk taken
	require.NoError(t, f.Close())
	got := cleanStamp(dir)
	require.LessOrEqual(t, len(got), maxCleanStamp)
	require.Equal(t, want, got[:len(want)])

	n, err := VerifyAudit(dir)
	require.NoError(t, err)
	require.Equal(t, uint64(3), n)
}
