package wal

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/storetest"
)

// offsets returns the offset of every entry of a segment file.
func offsets(t *testing.T, path string) []int64 {
	t.Helper()
	var offs []int64
	var buf scanBuf
	_, _, torn, _, _, err := scanSegment(path, 1, true, true, 1<<30, &buf, func(_ uint64, _ string, off int64, _ []byte) error {
		offs = append(offs, off)
		return nil
	})
	require.NoError(t, err)
	require.False(t, torn)
	return offs
}

// fileSize returns the size of the file at path; of a segment that ends
// in preallocated space, the end of its records.
func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	var buf scanBuf
	if _, good, torn, _, zeros, err := scanSegment(path, 1, true, true, 1<<30, &buf, nil); err == nil && zeros && !torn {
		return good
	}
	return fi.Size()
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, 1)
	_, err = f.ReadAt(b, off)
	require.NoError(t, err)
	b[0] ^= 0x5a
	_, err = f.WriteAt(b, off)
	require.NoError(t, err)
}

// crashCopy copies the data directory of the open store s as a crash
// would leave it: every acknowledged write and no clean-shutdown marker.
// s stays open.
func crashCopy(t *testing.T, s *Store) string {
	t.Helper()
	dst := t.TempDir()
	require.NoError(t, os.CopyFS(dst, os.DirFS(s.Dir())))
	require.NoFileExists(t, cleanPath(dst))
	return dst
}

// requireNoZeroTail checks that the segment at path ends with its last
// record: no preallocated space after it.
func requireNoZeroTail(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	var buf scanBuf
	_, good, torn, _, zeros, err := scanSegment(path, 1, true, true, 1<<30, &buf, nil)
	require.NoError(t, err)
	require.False(t, torn)
	require.False(t, zeros, "%s ends in zero bytes", path)
	require.Equal(t, fi.Size(), good)
}

// storeWithTail returns the directory of a store that crashed after its
// subject "a" got n messages, with a last segment that is not empty. It
// does not preallocate, so its segments end with their last record, as
// tests that tear them at the end of the file want (crashes in
// preallocated space: prealloc_test.go).
func storeWithTail(t *testing.T, n int) (dir string, ms []store.Message, last string) {
	s := open(t, t.TempDir(), &Options{SegmentSize: 4096, NoPreallocate: true})
	ms = appendN(t, s, "a", 1, n)
	dir = crashCopy(t, s)
	require.NoError(t, s.Close(t.Context()))
	ss := segs(t, subjectLogDir(dir, "a"))
	last = ss[len(ss)-1].path
	require.NotZero(t, fileSize(t, last), "pick n so that the tail segment is not empty")
	return dir, ms, last
}

func TestTornTail(t *testing.T) {
	cases := []struct {
		name  string
		tear  func(t *testing.T, path string)
		drops int // messages lost: the torn one(s)
		// quiet: zero bytes from a record boundary to the end of the file
		// are preallocated space, which Open cuts without a report (a
		// record zeroed out there was never fsynced: its data would be
		// on disk)
		quiet bool
	}{
		{"cut mid-record", func(t *testing.T, path string) {
			require.NoError(t, os.Truncate(path, fileSize(t, path)-10))
		}, 1, false},
		{"cut inside the length prefix", func(t *testing.T, path string) {
			offs := offsets(t, path)
			require.NoError(t, os.Truncate(path, offs[len(offs)-1]+1))
		}, 1, false},
		{"last record fails its checksum", func(t *testing.T, path string) {
			flipByte(t, path, fileSize(t, path)-5)
		}, 1, false},
		{"size grew but the data is zeros", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			_, err = f.Write(make([]byte, 700))
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}, 0, true},
		{"last record zeroed out", func(t *testing.T, path string) {
			offs := offsets(t, path)
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.WriteAt(make([]byte, fileSize(t, path)-offs[len(offs)-1]), offs[len(offs)-1])
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}, 1, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, ms, last := storeWithTail(t, 40)
			c.tear(t, last)
			s := open(t, dir, &Options{SegmentSize: 4096})
			torn := s.Recovered()
			if c.quiet {
				require.Empty(t, torn)
				requireNoZeroTail(t, last)
			} else {
				require.Len(t, torn, 1)
				require.Equal(t, last, torn[0].File)
			}
			keep := ms[:len(ms)-c.drops]
			require.Equal(t, keep, readAll(t, s, "a"))
			for _, m := range ms[len(keep):] {
				_, err := s.Lookup(t.Context(), m.ID)
				require.ErrorIs(t, err, store.ErrNotFound)
			}
			m, _, err := s.Append(t.Context(), msg("a", "after", at(time.Hour)))
			require.NoError(t, err)
			require.Equal(t, uint64(len(keep)+1), m.Seq, "the log continues with the next sequence")
			require.NoError(t, s.Close(t.Context()))

			s = open(t, dir, &Options{SegmentSize: 4096})
			require.Empty(t, s.Recovered())
			require.Equal(t, append(keep, m), readAll(t, s, "a"))
		})
	}
}

func TestTornTailOfEveryLog(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, nil)
	ctx := t.Context()
	recs := storetest.Chain(3)
	require.NoError(t, s.AppendAudit(ctx, recs...))
	require.NoError(t, s.Put(ctx, "b", "k1", []byte("v1")))
	require.NoError(t, s.Put(ctx, "b", "k2", []byte("v2")))
	require.NoError(t, s.PutQuarantine(ctx, store.QuarantineRecord{ID: "q1", Time: base}))
	require.NoError(t, s.PutQuarantine(ctx, store.QuarantineRecord{ID: "q2", Time: base}))
	dir = crashCopy(t, s)
	require.NoError(t, s.Close(ctx))
	for _, d := range []string{"audit", "meta", "quarantine"} {
		ss := segs(t, filepath.Join(dir, d))
		p := ss[len(ss)-1].path
		require.NoError(t, os.Truncate(p, fileSize(t, p)-3))
	}
	s = open(t, dir, nil)
	require.Len(t, s.Recovered(), 3)
	last, _, err := s.AuditHead(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2), last.Seq)
	require.NoError(t, s.AppendAudit(ctx, recs[2]), "the chain continues from the surviving head")
	_, err = s.Get(ctx, "b", "k2")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.GetQuarantine(ctx, "q2")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.GetQuarantine(ctx, "q1")
	require.NoError(t, err)
}

func TestCorruption(t *testing.T) {
	type target struct {
		name string
		// damage returns the file and offset Open must name.
		damage func(t *testing.T, dir string) (string, int64)
	}
	recordIn := func(logDir string, seg, rec int) func(t *testing.T, dir string) (string, int64) {
		return func(t *testing.T, dir string) (string, int64) {
			ss := segs(t, filepath.Join(dir, logDir))
			if seg < 0 {
				seg += len(ss)
			}
			p := ss[seg].path
			offs := offsets(t, p)
			require.Greater(t, len(offs), rec+1, "not enough records in %s", p)
			flipByte(t, p, offs[rec]+7) // past the length prefix and checksum
			return p, offs[rec]
		}
	}
	targets := []target{
		{"message in an early segment", recordIn("messages/a", 0, 2)},
		{"message in the tail segment, not last", recordIn("messages/a", -1, 0)},
		{"length prefix in an early segment", func(t *testing.T, dir string) (string, int64) {
			p := segs(t, subjectLogDir(dir, "a"))[1].path
			offs := offsets(t, p)
			flipByte(t, p, offs[1]) // the record now claims another length
			return p, offs[1]
		}},
		{"meta", recordIn("meta", 0, 1)},
		{"audit", recordIn("audit", 0, 1)},
		{"quarantine", recordIn("quarantine", 0, 0)},
		{"subject name", func(t *testing.T, dir string) (string, int64) {
			p := filepath.Join(subjectLogDir(dir, "a"), "SUBJECT")
			flipByte(t, p, 6)
			return p, 0
		}},
		{"audit checkpoint", func(t *testing.T, dir string) (string, int64) {
			p := checkpointPath(dir)
			flipByte(t, p, 8)
			return p, 0
		}},
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, &Options{SegmentSize: 4096})
			ctx := t.Context()
			appendN(t, s, "a", 1, 60)
			recs := storetest.Chain(5)
			require.NoError(t, s.AppendAudit(ctx, recs...))
			_, err := s.TrimAuditBefore(ctx, recs[1].Time) // writes a checkpoint
			require.NoError(t, err)
			for i := range 3 {
				require.NoError(t, s.Put(ctx, "b", "k", []byte{byte(i)}))
				require.NoError(t, s.PutQuarantine(ctx, store.QuarantineRecord{ID: string(rune('a' + i)), Time: base}))
			}
			require.NoError(t, s.Close(ctx))

			file, off := tg.damage(t, dir)
			_, err = Open(dir, nil)
			require.ErrorIs(t, err, store.ErrCorrupt)
			var ce *store.CorruptError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, file, ce.File)
			require.Equal(t, off, ce.Offset)
			require.Contains(t, err.Error(), "corrupt")
			// Nothing was "repaired": the damage is still there.
			_, err = Open(dir, nil)
			require.ErrorIs(t, err, store.ErrCorrupt)
		})
	}
}

func TestSnapshotCorruption(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, &Options{CompactAfter: 10})
	for i := range 40 {
		require.NoError(t, s.Put(t.Context(), "b", "k", []byte{byte(i)}))
	}
	require.Eventually(t, func() bool { _, err := os.Stat(s.snapshotPath()); return err == nil }, 30*time.Second, 5*time.Millisecond)
	require.NoError(t, s.Close(t.Context()))
	p := filepath.Join(dir, "meta.snapshot")
	require.NoError(t, os.Truncate(p, fileSize(t, p)-1)) // a snapshot is written whole: no torn tail
	_, err := Open(dir, nil)
	var ce *store.CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, p, ce.File)
}

// rewriteAudit rewrites the audit log through fn, keeping checksums valid,
// so that only the hash chain can tell.
func rewriteAudit(t *testing.T, dir string, fn func([]store.AuditRecord) []store.AuditRecord) {
	t.Helper()
	logDir := filepath.Join(dir, "audit")
	var recs []store.AuditRecord
	_, err := scanLog(logDir, 1<<20, func(_ uint64, _ string, _ int64, rec []byte) error {
		r, err := decodeAudit(rec)
		recs = append(recs, r)
		return err
	})
	require.NoError(t, err)
	ss := segs(t, logDir)
	for _, sg := range ss {
		require.NoError(t, os.Remove(sg.path))
	}
	var out []byte
	for _, r := range fn(recs) {
		out = frame(out, encodeAudit(&r))
	}
	require.NoError(t, os.WriteFile(filepath.Join(logDir, segmentName(ss[0].start)), out, 0o640))
}

func TestAuditTampered(t *testing.T) {
	cases := []struct {
		name string
		fn   func([]store.AuditRecord) []store.AuditRecord
	}{
		{"field changed", func(rs []store.AuditRecord) []store.AuditRecord { rs[3].Outcome = "accepted!"; return rs }},
		{"record removed", func(rs []store.AuditRecord) []store.AuditRecord { return append(rs[:3:3], rs[4:]...) }},
		{"records swapped", func(rs []store.AuditRecord) []store.AuditRecord { rs[2], rs[3] = rs[3], rs[2]; return rs }},
		{"hash recomputed but chain broken", func(rs []store.AuditRecord) []store.AuditRecord {
			rs[3].Code = "FORGED"
			rs[3].Hash = rs[3].ComputeHash()
			return rs
		}},
		{"front removed without a checkpoint", func(rs []store.AuditRecord) []store.AuditRecord { return rs[2:] }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, nil)
			require.NoError(t, s.AppendAudit(t.Context(), storetest.Chain(8)...))
			require.NoError(t, s.Close(t.Context()))
			rewriteAudit(t, dir, c.fn)

			_, err := Open(dir, nil)
			require.ErrorIs(t, err, store.ErrTampered)
			require.NotErrorIs(t, err, store.ErrCorrupt)
			_, err = VerifyAudit(dir)
			require.ErrorIs(t, err, store.ErrTampered)
		})
	}
	t.Run("append refuses a broken chain", func(t *testing.T) {
		s := open(t, t.TempDir(), nil)
		recs := storetest.Chain(4)
		recs[2].Outcome = "changed"
		err := s.AppendAudit(t.Context(), recs...)
		require.ErrorIs(t, err, store.ErrTampered)
		last, _, err := s.AuditHead(t.Context())
		require.NoError(t, err)
		require.Zero(t, last.Seq, "a refused batch writes nothing")
		require.NoError(t, s.AppendAudit(t.Context(), storetest.Chain(4)...))
	})
}

func TestVerifyAndExportAudit(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, nil)
	recs := storetest.Chain(10)
	require.NoError(t, s.AppendAudit(t.Context(), recs...))

	n, err := VerifyAudit(dir) // beside the open store: it takes no lock
	require.NoError(t, err)
	require.Equal(t, uint64(10), n)

	_, err = s.TrimAuditBefore(t.Context(), recs[4].Time)
	require.NoError(t, err)
	require.NoError(t, s.Close(t.Context()))

	n, err = VerifyAudit(dir)
	require.NoError(t, err)
	require.Equal(t, uint64(6), n)

	var buf bytes.Buffer
	require.NoError(t, ExportAudit(dir, &buf))
	dec := json.NewDecoder(&buf)
	var got []store.AuditRecord
	for dec.More() {
		var r store.AuditRecord
		require.NoError(t, dec.Decode(&r))
		got = append(got, r)
	}
	require.Len(t, got, 6)
	for i, r := range got {
		want := recs[4+i]
		require.True(t, want.Time.Equal(r.Time))
		r.Time = want.Time
		require.Equal(t, want, r)
	}

	_, err = VerifyAudit(filepath.Join(dir, "missing"))
	require.Error(t, err)

	rewriteAudit(t, dir, func(rs []store.AuditRecord) []store.AuditRecord { rs[2].Ref = "x"; return rs })
	buf.Reset()
	err = ExportAudit(dir, &buf)
	require.ErrorIs(t, err, store.ErrTampered)
	require.Equal(t, 2, bytes.Count(buf.Bytes(), []byte("\n")), "records before the break are exported")
}

// A crash inside tidwall/wal's TruncateFront leaves NAME.START beside the
// segments it was about to delete; Open settles it as tidwall/wal does.
func TestCrashDuringTruncateFront(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{SegmentSize: 2048, Sync: SyncNone}
	s := open(t, dir, opts)
	ms := appendN(t, s, "a", 1, 40)
	require.NoError(t, s.Close(t.Context()))

	logDir := subjectLogDir(dir, "a")
	ss := segs(t, logDir)
	require.Greater(t, len(ss), 3)
	seg := ss[1]
	offs := offsets(t, seg.path)
	cut := seg.start + 2
	data, err := os.ReadFile(seg.path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(logDir, segmentName(cut)+".START"), data[offs[2]:], 0o640))

	s = open(t, dir, opts)
	f, l, err := s.Bounds(t.Context(), "a")
	require.NoError(t, err)
	require.Equal(t, [2]uint64{cut, 40}, [2]uint64{f, l})
	require.Equal(t, ms[cut-1:], readAll(t, s, "a"))
	_, err = s.Lookup(t.Context(), ms[0].ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	m, _, err := s.Append(t.Context(), msg("a", "next", base))
	require.NoError(t, err)
	require.Equal(t, uint64(41), m.Seq)
	require.NoFileExists(t, filepath.Join(logDir, segmentName(cut)+".START"), "tidwall/wal renamed it")
}
