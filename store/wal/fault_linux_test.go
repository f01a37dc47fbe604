package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestDiskFullReal fills a 2 MiB tmpfs. It needs CAP_SYS_ADMIN (root in
// most containers) and is skipped otherwise.
func TestDiskFullReal(t *testing.T) {
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=2m"); err != nil {
		t.Skipf("cannot mount a tmpfs (%v)", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(mnt, 0) })
	ballast := filepath.Join(mnt, "ballast")
	require.NoError(t, os.WriteFile(ballast, make([]byte, 256<<10), 0o600))

	dir := filepath.Join(mnt, "store")
	opts := &Options{SegmentSize: 128 << 10}
	s := open(t, dir, opts)
	ctx := t.Context()
	var acked []store.Message
	var full error
	for i := range 10000 {
		m := msg("a", fmt.Sprint("m", i), base)
		m.Body = make([]byte, 3000+i%1000)
		got, _, err := s.Append(ctx, m)
		if err != nil {
			full = err
			break
		}
		acked = append(acked, got)
	}
	require.ErrorIs(t, full, store.ErrFull)
	require.ErrorIs(t, full, syscall.ENOSPC)
	t.Logf("disk full after %d messages: %v", len(acked), full)
	require.Equal(t, acked, readAll(t, s, "a"), "reads keep working and show only what was acknowledged")
	big := msg("a", "still-full", base)
	big.Body = make([]byte, 64<<10)
	_, _, err := s.Append(ctx, big)
	require.ErrorIs(t, err, store.ErrFull)
	require.Equal(t, acked, readAll(t, s, "a"))

	require.NoError(t, os.Remove(ballast))
	m, _, err := s.Append(ctx, msg("a", "after", base))
	require.NoError(t, err, "appends resume once there is space")
	require.Equal(t, uint64(len(acked)+1), m.Seq)
	acked = append(acked, m)
	require.NoError(t, s.Close(ctx))

	s = open(t, dir, opts)
	require.Empty(t, s.Recovered())
	require.Equal(t, acked, readAll(t, s, "a"))
}
