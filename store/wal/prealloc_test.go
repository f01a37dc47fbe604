package wal

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/storetest"
)

// preallocating skips the test where the file system cannot preallocate.
func preallocating(t *testing.T) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "p")
	require.NoError(t, err)
	defer f.Close()
	if err := preallocate(f, 4096); err != nil {
		t.Skip("no preallocation here:", err)
	}
}

// tailOf returns the last segment of subject's log in dir.
func tailOf(t *testing.T, dir, subject string) string {
	t.Helper()
	ss := segs(t, subjectLogDir(dir, subject))
	return ss[len(ss)-1].path
}

// The tail segment is preallocated ahead of its writes while the store is
// open, and a clean shutdown cuts it back to its records.
func TestPreallocatedTailIsCutOnClose(t *testing.T) {
	preallocating(t)
	dir := t.TempDir()
	s := open(t, dir, nil)
	ms := appendN(t, s, "a", 1, 10)
	tail := tailOf(t, dir, "a")
	fi, err := os.Stat(tail)
	require.NoError(t, err)
	require.Greater(t, fi.Size(), fileSize(t, tail), "preallocated past its records")
	require.GreaterOrEqual(t, fi.Size(), int64(minPrealloc))
	require.Equal(t, ms, readAll(t, s, "a"))
	require.NoError(t, s.Close(t.Context()))
	requireNoZeroTail(t, tail)

	s = open(t, dir, nil)
	require.Empty(t, s.Recovered())
	require.Equal(t, ms, readAll(t, s, "a"))
}

// NoPreallocate leaves segments as long as their records.
func TestNoPreallocate(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, &Options{NoPreallocate: true})
	appendN(t, s, "a", 1, 10)
	requireNoZeroTail(t, tailOf(t, dir, "a"))
}

// A crash leaves the preallocated space: Open cuts it without a report, and
// the log goes on from its last record.
func TestCrashInPreallocatedSpace(t *testing.T) {
	preallocating(t)
	s := open(t, t.TempDir(), &Options{SegmentSize: 64 << 10})
	ms := appendN(t, s, "a", 1, 30)
	require.NoError(t, s.AppendAudit(t.Context(), storetest.Chain(3)...))
	dir := crashCopy(t, s)
	tail := tailOf(t, dir, "a")
	fi, err := os.Stat(tail)
	require.NoError(t, err)
	require.Greater(t, fi.Size(), fileSize(t, tail), "the copy holds the preallocated space")

	s2 := open(t, dir, &Options{SegmentSize: 64 << 10})
	require.Empty(t, s2.Recovered(), "preallocated space is no torn write")
	requireNoZeroTail(t, tail)
	require.Equal(t, ms, readAll(t, s2, "a"))
	head, _, err := s2.AuditHead(t.Context())
	require.NoError(t, err)
	require.Equal(t, uint64(3), head.Seq)
	m, _, err := s2.Append(t.Context(), msg("a", "after", at(time.Hour)))
	require.NoError(t, err)
	require.Equal(t, uint64(31), m.Seq)
	require.NoError(t, s2.Close(t.Context()))
	s2 = open(t, dir, &Options{SegmentSize: 64 << 10})
	require.Equal(t, append(ms, m), readAll(t, s2, "a"))
}

// After a clean shutdown no segment ends in zero bytes, so zero bytes after
// the last record are damage, as a torn tail is then.
func TestZeroTailAfterCleanShutdownIsDamage(t *testing.T) {
	preallocating(t)
	dir := t.TempDir()
	s := open(t, dir, nil)
	appendN(t, s, "a", 1, 10)
	require.NoError(t, s.Close(t.Context()))
	tail := tailOf(t, dir, "a")
	size := fileSize(t, tail)
	require.NoError(t, os.Truncate(tail, size+4096))

	_, err := Open(dir, nil)
	var ce *store.CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, tail, ce.File)
	require.Equal(t, size, ce.Offset)
}

// The segments a log leaves behind never end in preallocated space, which
// tidwall/wal would read as entries: preallocation stops at the segment
// size, and their records reach it before the log moves on.
func TestLeftSegmentsAreCut(t *testing.T) {
	preallocating(t)
	dir := t.TempDir()
	opts := &Options{SegmentSize: 4096}
	s := open(t, dir, opts)
	var ms []store.Message
	for i := range 60 { // one at a time: a batch and a sync each
		ms = append(ms, appendN(t, s, "a", i+1, 1)...)
	}
	ss := segs(t, subjectLogDir(dir, "a"))
	require.Greater(t, len(ss), 3)
	for _, sg := range ss[:len(ss)-1] {
		requireNoZeroTail(t, sg.path)
	}
	tail := ss[len(ss)-1].path
	fi, err := os.Stat(tail)
	require.NoError(t, err)
	require.Equal(t, int64(4096), fi.Size(), "the tail is preallocated up to the segment size")
	got, err := s.Read(t.Context(), "a", 1, 0)
	require.NoError(t, err)
	require.Equal(t, ms, got, "read back through tidwall/wal's reads of the segments left behind")
	require.NoError(t, s.Close(t.Context()))
	s = open(t, dir, opts)
	require.Equal(t, ms, readAll(t, s, "a"))
}

// zeroRange writes zero bytes over [from, to) of path.
func zeroRange(t *testing.T, path string, from, to int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt(make([]byte, to-from), from)
	require.NoError(t, err)
}

// A crash during the fsync of a batch written into preallocated space can
// leave holes in it: whole sectors of the batch read as zero while later
// ones were written. The batch was not acknowledged; Open drops it from
// the first hole, and reports it, as a torn tail. Zero bytes anywhere else
// are damage, and so is a hole after a clean shutdown.
func TestHolesInTheLastBatch(t *testing.T) {
	preallocating(t)
	cases := []struct {
		name string
		// hole makes the hole and returns how many records it drops;
		// end is the end of the records
		hole func(t *testing.T, path string, offs []int64, end int64) int
		torn bool
	}{
		{"a hole inside a record with one after it", func(t *testing.T, path string, offs []int64, end int64) int {
			for k := len(offs) - 2; k >= 0; k-- {
				from, to := offs[k], offs[k+1]
				if p := (from + sector) &^ (sector - 1); p < to {
					zeroRange(t, path, p, min(p+sector, to))
					return len(offs) - k
				}
			}
			t.Fatal("no record holds a sector boundary")
			return 0
		}, true},
		{"a hole from the start of the record before the last", func(t *testing.T, path string, offs []int64, end int64) int {
			from := offs[len(offs)-2]
			zeroRange(t, path, from, from+sector)
			require.Less(t, from+sector, end, "something written after the hole")
			return 2
		}, true},
		{"fewer zero bytes than a sector at a record's start", func(t *testing.T, path string, offs []int64, end int64) int {
			from := offs[len(offs)-3]
			zeroRange(t, path, from, from+100)
			return 0
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := open(t, t.TempDir(), &Options{SegmentSize: 64 << 10})
			ms := appendN(t, s, "a", 1, 40)
			dir := crashCopy(t, s)
			tail := tailOf(t, dir, "a")
			offs := offsets(t, tail)
			drops := c.hole(t, tail, offs, fileSize(t, tail))
			s2, err := Open(dir, &Options{SegmentSize: 64 << 10})
			if !c.torn {
				var ce *store.CorruptError
				require.ErrorAs(t, err, &ce)
				require.Equal(t, tail, ce.File)
				return
			}
			require.NoError(t, err)
			defer s2.Close(t.Context())
			torn := s2.Recovered()
			require.Len(t, torn, 1)
			require.Equal(t, tail, torn[0].File)
			require.Equal(t, offs[len(offs)-drops], torn[0].Offset)
			require.Equal(t, ms[:len(ms)-drops], readAll(t, s2, "a"))
			m, _, err := s2.Append(t.Context(), msg("a", "after", at(time.Hour)))
			require.NoError(t, err)
			require.Equal(t, uint64(len(ms)-drops+1), m.Seq)
		})
	}
	t.Run("after a clean shutdown", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir, &Options{SegmentSize: 64 << 10})
		appendN(t, s, "a", 1, 40)
		require.NoError(t, s.Close(t.Context()))
		tail := tailOf(t, dir, "a")
		offs := offsets(t, tail)
		from := offs[len(offs)-2]
		zeroRange(t, tail, from, from+sector)
		_, err := Open(dir, &Options{SegmentSize: 64 << 10})
		var ce *store.CorruptError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, tail, ce.File)
	})
}

// Close cuts zero bytes after the tail's records whoever put them there
// (an extension that failed with ENOSPC may still have grown the file), so
// that a clean shutdown never leaves what the next Open takes for damage.
func TestCloseCutsZerosItDidNotPreallocate(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, &Options{NoPreallocate: true})
	ms := appendN(t, s, "a", 1, 5)
	tail := tailOf(t, dir, "a")
	require.NoError(t, os.Truncate(tail, fileSize(t, tail)+8192))
	require.NoError(t, s.Close(t.Context()))
	requireNoZeroTail(t, tail)
	s = open(t, dir, nil)
	require.Equal(t, ms, readAll(t, s, "a"))
}

// A file system that refuses to preallocate costs nothing but the speed:
// unsupported, the log stops asking; out of space (ENOSPC), it asks again
// at the next fsync. Writes go on either way, and what the log holds reads
// back whole after a clean shutdown.
func TestPreallocateRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		again bool // asked again after the first refusal
	}{
		{"unsupported", syscall.EOPNOTSUPP, false},
		{"not implemented", errors.ErrUnsupported, false},
		{"disk full", syscall.ENOSPC, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, &Options{Sync: SyncAlways})
			var asked atomic.Int64
			s.faults.Store(&faults{prealloc: func(*logw, int64) error {
				asked.Add(1)
				return tc.err
			}})
			ms := appendN(t, s, "a", 1, 5)
			if tc.again {
				require.Equal(t, int64(5), asked.Load(), "each fsync asks again")
			} else {
				require.Equal(t, int64(1), asked.Load(), "asked once, then no more")
			}
			tail := tailOf(t, dir, "a")
			requireNoZeroTail(t, tail)
			require.NoError(t, s.Close(t.Context()))
			s = open(t, dir, nil)
			require.Empty(t, s.Recovered())
			require.Equal(t, ms, readAll(t, s, "a"))
		})
	}
}
