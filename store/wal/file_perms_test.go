//go:build unix

package wal

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/storetest"
)

// Messages may hold personal data: every file and directory the store
// creates is its owner's alone (0600, 0700), whatever the umask. Before,
// files were 0640 and directories 0750, readable by the owner's group.
func TestCreatedFilesAreOwnerOnly(t *testing.T) {
	old := syscall.Umask(0) // the most permissive umask: the store's own modes show
	t.Cleanup(func() { syscall.Umask(old) })

	dir := filepath.Join(t.TempDir(), "new", "data")
	opts := &Options{SegmentSize: 2048, CompactAfter: 10}
	s := open(t, dir, opts)
	ctx := t.Context()
	for i := range 20 {
		m := msg("a", "m"+string(rune('a'+i)), at(time.Duration(i)*time.Second))
		m.IdemKey, m.IdemExpires = m.ID, at(time.Hour) // trimmed with a live key: kept/
		_, _, err := s.Append(ctx, m)
		require.NoError(t, err)
	}
	_, err := s.TrimBefore(ctx, "a", at(10*time.Second)) // TruncateFront's .START file
	require.NoError(t, err)
	recs := storetest.Chain(4)
	require.NoError(t, s.AppendAudit(ctx, recs...))
	_, err = s.TrimAuditBefore(ctx, recs[2].Time) // audit.checkpoint
	require.NoError(t, err)
	require.NoError(t, s.PutQuarantine(ctx, store.QuarantineRecord{ID: "q", Time: base}))
	for i := range 40 {
		require.NoError(t, s.Put(ctx, "b", "k", []byte{byte(i)}))
	}
	require.Eventually(t, func() bool { _, err := os.Stat(s.snapshotPath()); return err == nil }, 30*time.Second, 5*time.Millisecond)
	require.NoError(t, s.Close(ctx)) // CLEAN

	n := 0
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		fi, err := d.Info()
		require.NoError(t, err)
		require.Zero(t, fi.Mode().Perm()&0o077, "%s is %v", p, fi.Mode())
		n++
		return nil
	}))
	for _, p := range []string{"LOCK", "CLEAN", "meta.snapshot", "audit.checkpoint"} {
		require.FileExists(t, filepath.Join(dir, p))
	}
	require.Greater(t, n, 15)
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o700), fi.Mode().Perm(), "the data directory Open created")
}
