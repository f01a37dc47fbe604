package wal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// fiemapExtent and fiemapHeader are struct fiemap_extent and struct fiemap
// of linux/fiemap.h.
type fiemapExtent struct {
	logical, physical, length uint64
	_                         [2]uint64
	flags                     uint32
	_                         [3]uint32
}

type fiemapHeader struct {
	start, length                 uint64
	flags, mapped, count, reserve uint32
}

const (
	fsIocFiemap        = 0xc020660b // _IOWR('f', 11, struct fiemap)
	fiemapFlagSync     = 0x1        // write dirty pages back before mapping
	fiemapExtUnwritten = 0x800      // allocated, but reads as zero until written
)

// unwrittenExtents returns the byte ranges of path that are allocated
// but not written (fallocate's unwritten extents); it skips the test
// where the file system does not map extents (FS_IOC_FIEMAP).
func unwrittenExtents(t *testing.T, path string) [][2]uint64 {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	const n = 64
	var buf struct {
		h fiemapHeader
		e [n]fiemapExtent
	}
	buf.h = fiemapHeader{length: ^uint64(0), flags: fiemapFlagSync, count: n}
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&buf))); errno != 0 {
		if errors.Is(errno, syscall.EOPNOTSUPP) || errors.Is(errno, syscall.ENOTTY) {
			t.Skipf("the file system maps no extents (%v)", errno)
		}
		require.NoError(t, errno)
	}
	var out [][2]uint64
	for _, e := range buf.e[:buf.h.mapped] {
		if e.flags&fiemapExtUnwritten != 0 {
			out = append(out, [2]uint64{e.logical, e.logical + e.length})
		}
	}
	return out
}

// The tail segment is preallocated with written zero bytes, not with
// unwritten extents: a batch written into unwritten space changes the
// file's block map, which its fsync would have to write with the data,
// where over written zeros the fdatasync of a batch flushes its data alone.
func TestPreallocatedSpaceIsWritten(t *testing.T) {
	preallocating(t)
	dir := t.TempDir()
	s := open(t, dir, nil)
	appendN(t, s, "a", 1, 10)
	tail := tailOf(t, dir, "a")
	fi, err := os.Stat(tail)
	require.NoError(t, err)
	require.Greater(t, fi.Size(), fileSize(t, tail), "preallocated past its records")
	require.Empty(t, unwrittenExtents(t, tail), "preallocated space is written zeros")
}

// preallocate only ever adds zero bytes at the end of a file: what the file
// holds stays, and a file already as long is left alone.
func TestPreallocateWritesOnlyPastTheEnd(t *testing.T) {
	preallocating(t)
	path := filepath.Join(t.TempDir(), "seg")
	head := []byte("records")
	require.NoError(t, os.WriteFile(path, head, 0o600))
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	for _, size := range []int64{100 << 10, 4096} { // the second is shorter: no change
		require.NoError(t, preallocate(f, size))
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Len(t, got, 100<<10)
	require.Equal(t, head, got[:len(head)])
	require.Equal(t, bytes.Repeat([]byte{0}, len(got)-len(head)), got[len(head):])
	require.NoError(t, datasync(f))
	require.NoError(t, f.Close())
	require.Error(t, datasync(f), "a closed file")
}
