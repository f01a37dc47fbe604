package wal

import (
	"encoding/binary"
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// A bit flip in the length prefix of a record in the middle of the tail
// segment can make it claim more bytes than the file holds, which is what
// a torn last write looks like. Before, Open after a crash took it for one
// and cut the segment there: the record and every acknowledged record
// after it were dropped as a "torn tail". A torn write's prefix is whole,
// so a prefix that, with one bit flipped back, frames a record that passes
// its checksum is damage: Open refuses, naming the file and offset, and
// changes nothing.
func TestFlippedLengthInTheTailSegmentIsNotATornTail(t *testing.T) {
	for _, c := range []struct {
		name string
		byte int  // of the prefix
		bit  byte // flipped
	}{
		{"length grows past the end", 1, 0x40},
		{"prefix grows a byte", 1, 0x80},
		{"low bit", 0, 0x01},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, _, last := storeWithTail(t, 50)
			offs := offsets(t, last)
			require.GreaterOrEqual(t, len(offs), 3)
			off := offs[len(offs)-3] // two acknowledged records follow it
			size := fileSize(t, last)
			flipBits(t, last, off+int64(c.byte), c.bit)

			_, err := Open(dir, &Options{SegmentSize: 4096})
			require.ErrorIs(t, err, store.ErrCorrupt)
			var ce *store.CorruptError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, last, ce.File)
			require.Equal(t, off, ce.Offset)
			require.Equal(t, size, fileSize(t, last), "nothing was cut")
		})
	}
}

// What a crash really leaves is still dropped: a whole record whose
// length runs past the end of the file, a torn last record followed by
// garbage that frames nothing.
func TestTornTailStillDropped(t *testing.T) {
	dir, ms, last := storeWithTail(t, 40)
	offs := offsets(t, last)
	// The last record's write was cut short: its prefix is whole.
	require.NoError(t, os.Truncate(last, offs[len(offs)-1]+20))
	s := open(t, dir, &Options{SegmentSize: 4096})
	require.Len(t, s.Recovered(), 1)
	require.Equal(t, ms[:len(ms)-1], readAll(t, s, "a"))
}

// Non-zero bytes after the last whole record of the tail that frame a
// bad record with more bytes after it are not something a crash leaves
// when the file system keeps data ordered (ext4's default, XFS): Open
// refuses them after a crash too, naming the offset, and cuts nothing.
// (Zeros after it, or a record that runs past the end, are dropped:
// TestTornTail.)
func TestGarbageAfterTheTailIsRefused(t *testing.T) {
	dir, _, last := storeWithTail(t, 50)
	size := fileSize(t, last)
	f, err := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write([]byte{0x05, 0xab, 0xcd, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = Open(dir, &Options{SegmentSize: 4096})
	var ce *store.CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, last, ce.File)
	require.Equal(t, size, ce.Offset)
	require.Equal(t, size+13, fileSize(t, last))
}

// A damaged length prefix read from disk allocates nothing before it is
// checked against the limit and the file: a claimed 2^31 or 2^62 bytes
// is refused without the memory.
func TestHugeLengthPrefixAllocatesNothing(t *testing.T) {
	for _, huge := range []uint64{1 << 31, 1 << 62} {
		for _, where := range []string{"middle", "tail"} {
			t.Run(where, func(t *testing.T) {
				dir, _, last := storeWithTail(t, 40)
				offs := offsets(t, last)
				data, err := os.ReadFile(last)
				require.NoError(t, err)
				prefix := binary.AppendUvarint(nil, huge)
				if where == "middle" {
					p := segs(t, subjectLogDir(dir, "a"))[0].path
					d0, err := os.ReadFile(p)
					require.NoError(t, err)
					o := offsets(t, p)[1]
					require.NoError(t, os.WriteFile(p, append(append(append([]byte(nil), d0[:o]...), prefix...), d0[o:]...), 0o600))
				} else {
					require.NoError(t, os.WriteFile(last, append(data[:offs[len(offs)-1]:offs[len(offs)-1]], prefix...), 0o600))
				}
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				s, err := Open(dir, &Options{SegmentSize: 4096})
				runtime.ReadMemStats(&after)
				// No write of the store ever framed so long a record: also
				// at the end of the tail it is damage, not a torn write.
				require.ErrorIs(t, err, store.ErrCorrupt)
				require.Nil(t, s)
				require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<20), "bytes allocated by Open")
			})
		}
	}
}

func flipBits(t *testing.T, path string, off int64, mask byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, 1)
	_, err = f.ReadAt(b, off)
	require.NoError(t, err)
	b[0] ^= mask
	_, err = f.WriteAt(b, off)
	require.NoError(t, err)
}
